#!/usr/bin/env bash
# Builds and runs a fuzz target with the stable toolchain (cargo-fuzz and nightly are not
# available here): libFuzzer from libfuzzer-sys plus LLVM's sanitizer-coverage instrumentation.
#
#   fuzz/run-stable.sh server_request_decoding [seconds]
set -euo pipefail
cd "$(dirname "$0")"
target="${1:?fuzz target name}"
seconds="${2:-60}"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps RUSTFLAGS away from build scripts and proc macros (as cargo-fuzz does).
cargo build --release --target x86_64-unknown-linux-gnu --bin "$target"
mkdir -p "corpus/$target"
cp -n seeds/"$target"/* "corpus/$target/" 2>/dev/null || true
"target/x86_64-unknown-linux-gnu/release/$target" "corpus/$target" -max_total_time="$seconds" -print_final_stats=1
