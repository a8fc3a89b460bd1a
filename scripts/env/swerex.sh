# shellcheck shell=bash
# Where scripts/setup/20-swerex.sh installed SWE-ReX 1.4.0. Tests that need the real
# `swerex-remote` or its Python client read this; when it is set they FAIL if the venv is missing.
UNIAGENT_SWEREX_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-swerex"
export UNIAGENT_SWEREX_VENV
