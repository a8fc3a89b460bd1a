#!/bin/bash
errors=0; warnings=0
grep -qx 'errors=2' /app/summary.txt 2>/dev/null && errors=1
grep -qx 'warnings=3' /app/summary.txt 2>/dev/null && warnings=1
lines=$(wc -l < /app/summary.txt 2>/dev/null || echo 0)
reward=0
if [ "$errors" = 1 ] && [ "$warnings" = 1 ] && [ "$lines" = 2 ]; then reward=1; fi
printf '{"reward": %s, "errors": %s, "warnings": %s}\n' "$reward" "$errors" "$warnings" > /logs/verifier/reward.json
