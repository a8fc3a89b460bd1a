# shellcheck shell=bash
# The image scripts/setup/40-docker-image.sh built, for the docker tests and examples. When a
# Docker daemon is reachable the tests FAIL if this image is missing (CI builds it).
UNIAGENT_DOCKER_IMAGE="$(bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/build-sandbox-image.sh" --print-tag)"
export UNIAGENT_DOCKER_IMAGE
