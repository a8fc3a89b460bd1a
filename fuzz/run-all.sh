#!/usr/bin/env bash
# The short fuzz run: every target for N seconds (default 60) with the stable toolchain, one
# after the other, then a summary line per target (runs, executions per second, corpus size,
# crashes). Not part of scripts/test: run it on a schedule or before a release.
#
#   fuzz/run-all.sh [seconds] [target...]
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^uniagent-fuzz$')
fi
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
cargo build --release --target x86_64-unknown-linux-gnu $(printf -- '--bin %s ' "${targets[@]}")
mkdir -p logs
status=0
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target" "artifacts/$target"
  cp -n seeds/"$target"/* "corpus/$target/" 2>/dev/null || true
  log="logs/$target.log"
  if "target/x86_64-unknown-linux-gnu/release/$target" "corpus/$target" \
      -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 -timeout=30 \
      -artifact_prefix="artifacts/$target/" >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "corpus/$target" -type f | wc -l)
  printf '%-26s %-6s runs=%-10s exec/s=%-8s corpus=%s\n' "$target" "$result" "${runs:-?}" "${speed:-?}" "$corpus"
done
exit $status
