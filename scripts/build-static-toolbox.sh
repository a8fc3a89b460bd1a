#!/usr/bin/env bash
# Builds a statically linked `uniagent-toolbox` (glibc, `+crt-static`), the in-sandbox binary
# behind `str_replace_editor`, so it runs inside any x86-64 Linux image with no shared
# libraries. Prints the path of the binary; point UNIAGENT_TOOLBOX_BIN at it (or
# ToolboxConfig::binary) so the tools upload it.
#
#   scripts/build-static-toolbox.sh
#   CARGO_TARGET_DIR=... scripts/build-static-toolbox.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release -p uniagent-tools --bin uniagent-toolbox --target "$target" >&2
out="${CARGO_TARGET_DIR:-target}/$target/release/uniagent-toolbox"
# A static-pie binary makes ldd print "statically linked" (exit 0); a plain static one "not a
# dynamic executable" (exit 1). Anything else lists shared libraries.
if ! ldd "$out" 2>&1 | grep -qE 'statically linked|not a dynamic executable'; then
    echo "build-static-toolbox: $out is dynamically linked:" >&2
    ldd "$out" >&2 || true
    exit 1
fi
"$out" --version >&2
echo "$out"
