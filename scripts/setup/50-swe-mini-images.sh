#!/usr/bin/env bash
# The swe-mini dataset's Docker images, built locally on top of the sandbox base image of
# 40-docker-image.sh (no registry): one per task from datasets/swe-mini, then the same tasks
# as R2E-Gym-style images (datasets/swe-mini-r2e: each FROM its swe-mini image, plus the hidden
# tests at /r2e_tests and /testbed/run_tests.sh).
# Idempotent: an image whose recipe hash label matches is kept. Exits 0 without building only
# when no Docker daemon is reachable (the docker end-to-end tests then skip, saying so).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "swe-mini-images: no Docker daemon is reachable; skipping"
    exit 0
fi
python3 scripts/swe-mini/build.py images
python3 scripts/swe-mini/r2e.py images
