#!/bin/bash
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello, harbor" ] && [ "$(tail -c1 /app/greeting.txt | od -An -c | tr -d ' ')" = '\n' ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
