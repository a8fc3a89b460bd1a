# shellcheck shell=bash
# Build and run time environment for uniagent-train's `tch` feature (libtorch from the PyPI torch
# wheel in .venv-torch, installed by scripts/setup/30-torch.sh):
# - torch-sys's build script asks the `python3` on PATH for torch's include and lib dirs when
#   LIBTORCH_USE_PYTORCH is set, so the venv's bin goes first on PATH;
# - binaries and tests find libtorch*.so (and the nvidia-* libraries it needs) at run time
#   through LD_LIBRARY_PATH;
# - tests that need the real verl/torch read UNIAGENT_TORCH_VENV; when it is set they FAIL if the
#   venv is missing.
UNIAGENT_TORCH_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-torch"
export UNIAGENT_TORCH_VENV
export LIBTORCH_USE_PYTORCH=1
export PATH="$UNIAGENT_TORCH_VENV/bin:$PATH"
__uniagent_torch_lib="$(echo "$UNIAGENT_TORCH_VENV"/lib/python3*/site-packages/torch/lib)"
export LD_LIBRARY_PATH="$__uniagent_torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset __uniagent_torch_lib
