#!/usr/bin/env bash
# Hugging Face transformers (CPU only, no torch) in a project-local venv `.venv-codec`: the
# reference `apply_chat_template` for the codec's live cross-check test and the Python baseline
# of benches/codec.rs. Idempotent: a marker file records the pins; rerunning does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/lib/venv.sh
VENV="$PWD/.venv-codec"
PINS=(transformers==4.57.6 tokenizers==0.22.2 jinja2==3.1.6)
MARKER="$VENV/.uniagent-installed"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "${PINS[*]}" ] && [ -x "$VENV/bin/python" ]; then
    echo "codec: ${PINS[*]} already in $VENV"
    exit 0
fi
venv_create "$VENV"
venv_install "$VENV" "${PINS[@]}"
"$VENV/bin/python" -c "from transformers import PreTrainedTokenizerFast" >/dev/null
echo "${PINS[*]}" > "$MARKER"
echo "codec: installed ${PINS[*]} into $VENV"
