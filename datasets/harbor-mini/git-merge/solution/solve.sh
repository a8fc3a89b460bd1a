#!/bin/bash
cd /app/repo
git checkout -q main
git merge -q --no-edit feature
