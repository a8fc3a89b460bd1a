#!/bin/bash
cd /app/repo || { echo 0 > /logs/verifier/reward.txt; exit 0; }
if [ "$(git branch --show-current)" = main ] \
    && git merge-base --is-ancestor feature main \
    && [ "$(git show main:feature.txt 2>/dev/null)" = 'feature work' ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
