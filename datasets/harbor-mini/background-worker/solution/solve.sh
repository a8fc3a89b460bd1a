#!/bin/bash
cd /app
setsid nohup python3 /app/worker.py > /dev/null 2>&1 < /dev/null &
echo $! > /app/worker.pid
