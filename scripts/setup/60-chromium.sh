#!/usr/bin/env bash
# Headless Chromium (Debian's `chromium` package) for the viewer's browser tests
# (crates/uniagent-cli/tests/view_browser.rs drive it through the DevTools protocol).
# Idempotent: does nothing when a chromium binary is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    echo "chromium: $(command -v chromium || command -v chromium-browser) present"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; then
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends chromium >/dev/null
fi
command -v chromium >/dev/null
echo "chromium: installed $(chromium --version 2>/dev/null || echo chromium)"
