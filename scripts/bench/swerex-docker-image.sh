#!/usr/bin/env bash
# Builds the image on which the docker start benchmark (crates/uniagent-sandboxes/benches/docker_start.rs)
# measures SWE-ReX's own `DockerDeployment` as its baseline. No registry and no network: the
# sandbox image has python3 (3.11) but no pip, so this copies the site-packages of the project's
# SWE-ReX venv (.venv-swerex, from scripts/setup/20-swerex.sh; CPython 3.11, pure-Python or
# cp311 manylinux wheels) into the image and adds the `swerex-remote` command that
# `DockerDeployment` runs first when it starts a container.
#
#   scripts/bench/swerex-docker-image.sh              build (or reuse) the image, print its tag
#   scripts/bench/swerex-docker-image.sh --print-tag  print the tag, build nothing
#
# The base is $UNIAGENT_DOCKER_IMAGE, else uniagent-sandbox-base:latest; the venv is
# $UNIAGENT_SWEREX_VENV, else ./.venv-swerex. The tag, `uniagent-swerex-baseline:<12 hex>`, is a
# content hash of this script, the base image's id and the venv's file list (paths, sizes,
# mtimes), so rerunning with nothing changed reuses the image (idempotent).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SELF="$ROOT/scripts/bench/$(basename "${BASH_SOURCE[0]}")"
BASE="${UNIAGENT_DOCKER_IMAGE:-uniagent-sandbox-base:latest}"
VENV="${UNIAGENT_SWEREX_VENV:-$ROOT/.venv-swerex}"
REPO="uniagent-swerex-baseline"

fail() {
    echo "swerex-docker-image: $*" >&2
    exit 1
}

SITE="$(ls -d "$VENV"/lib/python3.11/site-packages 2>/dev/null || true)"
[ -n "$SITE" ] && [ -d "$SITE/swerex" ] \
    || fail "no SWE-ReX venv with Python 3.11 at $VENV (run scripts/setup/20-swerex.sh)"
BASE_ID="$(docker image inspect --format '{{.Id}}' "$BASE" 2>/dev/null)" \
    || fail "base image $BASE is missing (run scripts/build-sandbox-image.sh)"

# pip/setuptools are not needed at run time and byte-code caches are rebuilt in the image.
listing() {
    (cd "$SITE" && find . \( -name __pycache__ -o -name 'pip' -o -name 'pip-*' -o -name 'setuptools' \
        -o -name 'setuptools-*' -o -name 'pkg_resources' -o -name '_distutils_hack' \
        -o -name 'distutils-precedence.pth' \) -prune -o -type f -printf '%P %s %T@\n' | LC_ALL=C sort)
}
HASH="$({ sha256sum "$SELF" | cut -d' ' -f1; echo "$BASE_ID"; listing; } | sha256sum | cut -c1-12)"
TAG="$REPO:$HASH"

if [ "${1:-}" = "--print-tag" ]; then
    echo "$TAG"
    exit 0
fi
if docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "$TAG"
    exit 0
fi

CTX="$(mktemp -d /var/tmp/uniagent-swerex-image.XXXXXX)"
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/site-packages"
listing | cut -d' ' -f1 | (cd "$SITE" && tar -cf - --files-from=-) | tar -xf - -C "$CTX/site-packages"
cat > "$CTX/swerex-remote" <<'SH'
#!/bin/sh
# SWE-ReX's server on the image's own python3, with the copied site-packages.
PYTHONPATH=/opt/swerex/site-packages exec python3 -c 'import sys; from swerex.server import main; sys.exit(main())' "$@"
SH
chmod 755 "$CTX/swerex-remote"
cat > "$CTX/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY site-packages /opt/swerex/site-packages
COPY swerex-remote /usr/local/bin/swerex-remote
RUN python3 -m compileall -q /opt/swerex/site-packages >/dev/null; swerex-remote --version
DOCKERFILE
if ! out="$(docker build -q -t "$TAG" "$CTX" 2>&1)"; then
    echo "$out" >&2
    fail "docker build of $TAG failed"
fi
echo "$TAG"
