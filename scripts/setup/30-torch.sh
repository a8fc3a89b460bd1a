#!/usr/bin/env bash
# libtorch for the `tch` feature of uniagent-train, and the reference verl 0.9.1 for its golden
# numerics tests, in a project-local venv `.venv-torch`.
#
# tch 0.26 links against PyTorch 2.13.0, taken from the PyPI `torch` wheel (the build finds it
# through LIBTORCH_USE_PYTORCH=1, see scripts/env/torch.sh). Everything is pinned in
# 30-torch.requirements.txt and installed with --no-deps, which keeps the install reproducible
# and leaves out triton (0.7 GB, only needed by torch.compile). Idempotent: a marker file holds
# the hash of the requirements; rerunning with it up to date does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-torch"
REQS="scripts/setup/30-torch.requirements.txt"
STAMP="$(sha256sum "$REQS" | cut -d' ' -f1)"
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
    echo "torch: $VENV up to date"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" --no-deps -r "$REQS"
# Smoke test: torch loads (with its CUDA libraries, even on CPU) and so do the verl modules the
# golden tests call.
"$VENV/bin/python" - <<'PY'
import torch
from verl.trainer.ppo import core_algos  # noqa: F401
from verl.workers.config import ActorConfig  # noqa: F401
import transformers, safetensors  # noqa: F401,E401
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
PY
echo "$STAMP" > "$MARKER"
echo "torch: installed torch 2.13.0 + verl 0.9.1 into $VENV"
