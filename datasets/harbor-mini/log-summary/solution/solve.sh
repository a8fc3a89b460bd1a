#!/bin/bash
cd /app
printf 'errors=%s\nwarnings=%s\n' "$(cat logs/*.log | grep -c '^ERROR')" "$(cat logs/*.log | grep -c '^WARN')" > summary.txt
