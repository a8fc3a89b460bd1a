#!/usr/bin/env bash
# mini-swe-agent (a real agent harness from PyPI, with the litellm it talks through) in a
# project-local venv, `.venv-mini-swe`, for uniagent-gateway's end-to-end harness test
# (crates/uniagent-gateway/tests/mini_swe_agent.rs). Its own venv: it pins openai/litellm
# versions of its own, which must not move the SDK pins of 60-gateway-clients.sh.
# Idempotent: a marker file records the pinned versions; rerunning with it present does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-mini-swe"
PINS=(mini-swe-agent==2.4.6 litellm==1.110.2)
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "${PINS[*]}" ] && [ -x "$VENV/bin/python" ]; then
    echo "mini-swe-agent: ${PINS[*]} already in $VENV"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" "${PINS[@]}"
LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/python" -c "import minisweagent, litellm" >/dev/null
echo "${PINS[*]}" > "$MARKER"
echo "mini-swe-agent: installed ${PINS[*]} into $VENV"
