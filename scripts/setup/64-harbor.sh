#!/usr/bin/env bash
# Harbor's own task model, to check that datasets/harbor-mini is what Harbor accepts
# (crates/uniagent-rewards/tests/harbor_package.rs). The `harbor` package needs Python >= 3.12;
# this machine has 3.11, so the wheel is downloaded (not installed) and unpacked into
# `.venv-harbor/harbor-src`, and the venv holds only what its task model imports. The test
# loads tasks with Harbor's `Task` class, giving 3.11 the one name it lacks (`typing.override`,
# from typing_extensions). Idempotent: a marker file records the pins.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-harbor"
HARBOR=harbor==0.26.0
PINS=(pydantic==2.14.4 toml==0.10.2 pathspec==1.1.1 shortuuid==1.0.13 typing_extensions==4.16.0)
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$HARBOR ${PINS[*]}" ] && [ -x "$VENV/bin/python" ]; then
    echo "harbor: $HARBOR task model already in $VENV"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" "${PINS[@]}"
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT
"$VENV/bin/python" -m pip download --disable-pip-version-check --quiet --no-deps \
    --only-binary=:all: --python-version 3.13 -d "$WHEELS" "$HARBOR"
rm -rf "$VENV/harbor-src"
"$VENV/bin/python" -m zipfile -e "$WHEELS"/harbor-*.whl "$VENV/harbor-src"
echo "$HARBOR ${PINS[*]}" > "$MARKER"
echo "harbor: $HARBOR task model unpacked into $VENV/harbor-src"
