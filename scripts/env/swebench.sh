# shellcheck shell=bash
# Where scripts/setup/50-swebench.sh installed the `swebench` package (5.0.2). uniagent-rewards'
# live parity test feeds generated logs to the package's own parsers and grading through it;
# when this is set the test FAILS if the venv is missing.
UNIAGENT_SWEBENCH_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-swebench"
export UNIAGENT_SWEBENCH_VENV
