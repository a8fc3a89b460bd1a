#!/bin/bash
cd /app
{ echo word,count; sort words.txt | uniq -c | awk '{print $2","$1}' | sort -t, -k2,2nr -k1,1; } > counts.csv
