#!/bin/bash
mkdir -p /app/dist
python3 -m zipapp /app/adder -m 'cli:main' -o /app/dist/adder.pyz
