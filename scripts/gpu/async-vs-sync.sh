#!/usr/bin/env bash
# Sync against fully-async RL on the quickstart with generation and training on separate
# devices: the quickstart's policy trains on the CPU (the tiny model `train` starts from a seed
# lives there) while the generation engine's copy runs on a GPU (`trainer.generation_device`,
# default cuda:0; weight syncs copy across). This is the real form of what
# `scripts/bench-train-modes --emulate R,T` emulates on a CPU-only machine. For a machine with
# a CUDA GPU and the CUDA torch wheel in .venv-torch; not run in CI.
#
#   bash scripts/gpu/async-vs-sync.sh                  # seeds 7, 8 and 9, 40 RL steps
#   SEEDS="7" DEVICE=cuda:1 bash scripts/gpu/async-vs-sync.sh --quick
#
# Prints one Markdown table per seed (bench-train-modes'); the runs stay under
# target/async-vs-sync/seed-N. Extra arguments go to every run.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env/torch.sh
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -lt 1 ]; then
    echo "async-vs-sync: needs a CUDA GPU, libtorch sees none" >&2
    exit 2
fi
for seed in ${SEEDS:-7 8 9}; do
    echo "## seed $seed"
    OUT="target/async-vs-sync/seed-$seed" bash scripts/bench-train-modes \
        --set "trainer.seed=$seed" --set "trainer.generation_device=${DEVICE:-cuda:0}" "$@"
done
