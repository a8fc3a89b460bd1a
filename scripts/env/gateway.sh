# shellcheck shell=bash
# Where scripts/setup/60-gateway-clients.sh installed the official openai and anthropic Python
# SDKs. uniagent-gateway's real-client test drives the gateway with them; when this is set the
# test FAILS if the venv is missing.
UNIAGENT_GATEWAY_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-gateway"
export UNIAGENT_GATEWAY_VENV

# Where scripts/setup/61-mini-swe-agent.sh installed mini-swe-agent. The gateway's harness
# end-to-end test runs it; when this is set the test FAILS if the venv is missing.
UNIAGENT_MINI_SWE_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv-mini-swe"
export UNIAGENT_MINI_SWE_VENV
