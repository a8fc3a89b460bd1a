# shellcheck shell=bash
# Where scripts/setup/10-codec.sh installed transformers. The codec's cross-check test against
# `apply_chat_template` and benches/codec.rs read this; when it is set the test FAILS if the venv
# is missing.
UNIAGENT_CODEC_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-codec"
export UNIAGENT_CODEC_VENV
