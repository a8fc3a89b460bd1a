#!/usr/bin/env bash
# The swe-mini dataset's Docker images (one per task, built locally from
# datasets/swe-mini on top of the sandbox base image of 40-docker-image.sh; no registry).
# Idempotent: an image whose recipe hash label matches is kept. Exits 0 without building only
# when no Docker daemon is reachable (the docker end-to-end tests then skip, saying so).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "swe-mini-images: no Docker daemon is reachable; skipping"
    exit 0
fi
python3 scripts/swe-mini/build.py images
