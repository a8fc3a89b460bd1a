# shellcheck shell=bash
# Sourced by the installers in scripts/setup/: project-local Python venvs made with uv.
#
# uv (pinned, from PyPI, in .venv-tools) installs from its own cache with hard links, so once a
# machine has downloaded a wheel, every later install of it (a second checkout, a CI run on a
# clean clone) takes seconds: the 2.5 GB torch venv goes from about 4 minutes with pip to about
# 1 second. The venvs stay in the checkout, one per concern, as before.
#
#   venv_create VENV              an empty venv at VENV (with pip, for tools that call it)
#   venv_install VENV ARGS...     `pip install ARGS...` into VENV
UNIAGENT_UV_PIN="uv==0.13.9"
UNIAGENT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

# The path of the pinned uv, installed into .venv-tools on first use.
uniagent_uv() {
    local tools="$UNIAGENT_ROOT/.venv-tools"
    if [ ! -x "$tools/bin/uv" ] || [ "$(cat "$tools/.uniagent-installed" 2>/dev/null)" != "$UNIAGENT_UV_PIN" ]; then
        "${PYTHON:-python3}" -m venv "$tools" >&2
        "$tools/bin/python" -m pip install --disable-pip-version-check --quiet "$UNIAGENT_UV_PIN" >&2
        echo "$UNIAGENT_UV_PIN" > "$tools/.uniagent-installed"
    fi
    echo "$tools/bin/uv"
}

venv_create() {
    local venv=$1
    if [ ! -x "$venv/bin/python" ]; then
        "$(uniagent_uv)" venv --quiet --seed --python "${PYTHON:-python3}" "$venv"
    fi
}

venv_install() {
    local venv=$1
    shift
    "$(uniagent_uv)" pip install --quiet --python "$venv/bin/python" "$@"
}
