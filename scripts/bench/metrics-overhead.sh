#!/usr/bin/env bash
# The cost of metrics on the loop: the scripted load test (examples/load_test.rs, 10,000
# concurrent token-level rollouts of 5 turns by default) without metrics and with the
# Prometheus recorder installed and rendered once a second, alternated ROUNDS times in one
# invocation so both see the same machine. Prints each run's rollouts/s and CPU time per turn
# (less sensitive than wall time to other load on the machine), the medians, and the ratios
# with/without (the target: at most 2 % slower).
#
#   scripts/bench/metrics-overhead.sh [ROUNDS] [ROLLOUTS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
rollouts="${2:-10000}"
cargo build --quiet --release -p uniagent-examples --bin load-test
bin="${CARGO_TARGET_DIR:-target}/release/load-test"
fields='import json,sys; r=json.load(sys.stdin); print(r["rollouts_per_s"], r["cpu_us_per_turn"])'
results=()
for round in $(seq "$rounds"); do
    read -r a_rate a_cpu < <("$bin" --rollouts "$rollouts" --turns 5 | python3 -c "$fields")
    read -r b_rate b_cpu < <("$bin" --rollouts "$rollouts" --turns 5 --metrics-addr 127.0.0.1:0 | python3 -c "$fields")
    printf 'round %s: without %.0f rollouts/s %.1f cpu-us/turn | with %.0f rollouts/s %.1f cpu-us/turn\n' \
        "$round" "$a_rate" "$a_cpu" "$b_rate" "$b_cpu"
    results+=("$a_rate,$a_cpu,$b_rate,$b_cpu")
done
python3 - "${results[@]}" <<'PY'
import statistics, sys
rows = [[float(x) for x in r.split(",")] for r in sys.argv[1:]]
med = [statistics.median(col) for col in zip(*rows)]
print(f"median rollouts/s: without {med[0]:.0f}, with {med[2]:.0f} -> with/without {med[2] / med[0]:.3f}")
print(f"median CPU us per turn: without {med[1]:.1f}, with {med[3]:.1f} -> with/without {med[3] / med[1]:.3f}")
PY
