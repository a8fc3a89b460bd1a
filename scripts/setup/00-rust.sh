#!/usr/bin/env bash
# Rust components the checks need.
set -euo pipefail
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy
fi
