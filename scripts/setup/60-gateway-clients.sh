#!/usr/bin/env bash
# The official `openai` and `anthropic` Python SDKs in a project-local venv, `.venv-gateway`, for
# uniagent-gateway's real-client tests (crates/uniagent-gateway/tests/python_clients.rs).
# Idempotent: a marker file records the pinned versions; rerunning with it present does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-gateway"
PINS=(openai==3.51.0 anthropic==2.10.0)
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "${PINS[*]}" ] && [ -x "$VENV/bin/python" ]; then
    echo "gateway clients: ${PINS[*]} already in $VENV"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" "${PINS[@]}"
"$VENV/bin/python" -c "import openai, anthropic" >/dev/null
echo "${PINS[*]}" > "$MARKER"
echo "gateway clients: installed ${PINS[*]} into $VENV"
