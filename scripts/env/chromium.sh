# shellcheck shell=bash
# The Chromium binary of scripts/setup/60-chromium.sh for the viewer's browser tests; when
# UNIAGENT_REQUIRE_BROWSER is set (the suite sets it) those tests FAIL without one.
UNIAGENT_CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
export UNIAGENT_CHROMIUM
