#!/usr/bin/env bash
# The Python half of the verl online bridge (python/uniagent-verl, issue 33) in `.venv-torch`:
# its few extra dependencies, pinned in 63-verl.requirements.txt and installed with --no-deps
# (the rest is already there from 30-torch.sh), then the package itself in editable mode.
# Idempotent: a marker file holds the hash of the requirements, the package's pyproject and
# this checkout's path (the editable install points at it); rerunning with it up to date does
# nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-torch"
REQS="scripts/setup/63-verl.requirements.txt"
PKG="python/uniagent-verl"
if [ ! -x "$VENV/bin/python" ]; then
    bash scripts/setup/30-torch.sh
fi
STAMP="$( (cat "$REQS" "$PKG/pyproject.toml"; echo "$PWD") | sha256sum | cut -d' ' -f1)"
MARKER="$VENV/.uniagent-verl-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$STAMP" ]; then
    echo "verl bridge: $VENV up to date"
    exit 0
fi
venv_install "$VENV" --no-deps -r "$REQS"
venv_install "$VENV" --no-deps -e "$PKG"
# Smoke test: the package imports, and `import verl` registers the agent loop through the
# package's `verl.plugins` entry point.
"$VENV/bin/python" - <<'PY'
import aiohttp, transfer_queue, pytest  # noqa: F401,E401
import verl  # noqa: F401
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
assert "uniagent" in _agent_loop_registry, sorted(_agent_loop_registry)
PY
echo "$STAMP" > "$MARKER"
echo "verl bridge: installed uniagent-verl (editable) and its dependencies into $VENV"
