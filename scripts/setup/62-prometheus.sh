#!/usr/bin/env bash
# The Prometheus server (Debian's `prometheus` package) for the metrics end-to-end test
# (crates/uniagent-cli/tests/prometheus.rs starts it on a free port with a generated config
# and scrapes a live `uniagent run` and gateway). Only the binary is used: the packaged
# service is not started. Idempotent: does nothing when `prometheus` is already on PATH.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
    echo "prometheus: $(command -v prometheus) present"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the package's postinst must not start the system service.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
if ! apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; then
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends prometheus >/dev/null
fi
command -v prometheus >/dev/null
echo "prometheus: installed $(prometheus --version 2>&1 | head -1)"
