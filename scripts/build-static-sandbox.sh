#!/usr/bin/env bash
# Builds a statically linked `uniagent-sandbox` (glibc, `+crt-static`) that runs inside any
# x86-64 Linux image, with no Python and no shared libraries. Prints the path of the binary.
#
#   scripts/build-static-sandbox.sh            release build
#   CARGO_TARGET_DIR=... scripts/build-static-sandbox.sh
#
# See crates/uniagent-sandboxes/SERVER.md.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release -p uniagent-sandboxes --no-default-features --features server \
    --bin uniagent-sandbox --target "$target" >&2
out="${CARGO_TARGET_DIR:-target}/$target/release/uniagent-sandbox"
# A static(-pie) binary needs no shared library: ldd lists none ("statically linked").
if ldd "$out" 2>&1 | grep -q "=>"; then
    echo "build-static-sandbox: $out links shared libraries:" >&2
    ldd "$out" >&2
    exit 1
fi
echo "$out"
