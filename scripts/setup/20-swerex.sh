#!/usr/bin/env bash
# SWE-ReX 1.4.0 (the reference sandbox server and Python client) in a project-local venv,
# `.venv-swerex`, for the compatibility tests and the sandbox benchmark. Idempotent: a marker
# file records the pinned version; rerunning with it present does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-swerex"
PIN="swe-rex==1.4.0"
# The stack the reference measurements used (shared/reference/swerex.md), plus aiohttp for
# SWE-ReX's RemoteRuntime client.
EXTRA=(fastapi==0.165.0 uvicorn==0.54.0 pydantic==2.14.4 pexpect==4.9.0 aiohttp==3.14.5)
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$PIN" ] && [ -x "$VENV/bin/swerex-remote" ]; then
    echo "swerex: $PIN already in $VENV"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" "$PIN" "${EXTRA[@]}"
"$VENV/bin/python" -c "import swerex, swerex.server, swerex.runtime.remote" >/dev/null
[ -x "$VENV/bin/swerex-remote" ]
echo "$PIN" > "$MARKER"
echo "swerex: installed $PIN into $VENV"
