#!/bin/bash
if [ "$(python3 /app/dist/adder.pyz 3 4 2>/dev/null)" = 7 ] && [ "$(python3 /app/dist/adder.pyz 10 20 12 2>/dev/null)" = 42 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
