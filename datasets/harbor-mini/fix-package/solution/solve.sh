#!/bin/bash
sed -i 's/from .middle import median/from .middles import median/' /app/stats/__init__.py
