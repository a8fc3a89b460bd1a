# shellcheck shell=bash
# The Prometheus server scripts/setup/62-prometheus.sh installed. The metrics end-to-end test
# (crates/uniagent-cli/tests/prometheus.rs) starts it; when this is set the test FAILS if the
# binary is missing.
UNIAGENT_PROMETHEUS="$(command -v prometheus || echo /usr/bin/prometheus)"
export UNIAGENT_PROMETHEUS
