#!/usr/bin/env bash
# The `swebench` package (5.0.2, the current release) in a project-local venv, `.venv-swebench`,
# for uniagent-rewards' parity work: the live cross-check test of the log parsers and the golden
# generator (crates/uniagent-rewards/tests/golden/swebench/generate.py). Only what the log
# parsers and grading import is installed (`--no-deps` plus unidiff): the package's own
# dependencies (docker, datasets, modal, ...) are not needed to read logs. pytest and
# pytest-xdist make the real test runs the golden logs come from. Idempotent (marker file).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-swebench"
PIN="swebench==5.0.2 unidiff==1.0.1 pytest==9.2.0 pytest-xdist==3.8.0"
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$PIN" ] && [ -x "$VENV/bin/python" ]; then
    echo "swebench: $PIN already in $VENV"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" --no-deps swebench==5.0.2 unidiff==1.0.1
venv_install "$VENV" pytest==9.2.0 pytest-xdist==3.8.0
"$VENV/bin/python" "crates/uniagent-rewards/tests/golden/swebench/oracle.py" --self-check
echo "$PIN" > "$MARKER"
echo "swebench: installed $PIN into $VENV"
