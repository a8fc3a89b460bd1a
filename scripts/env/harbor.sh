# shellcheck shell=bash
# Where scripts/setup/64-harbor.sh put Harbor's task model. The Harbor conformance test loads
# datasets/harbor-mini with it; when this is set the test FAILS if the venv is missing.
UNIAGENT_HARBOR_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-harbor"
export UNIAGENT_HARBOR_VENV
