#!/usr/bin/env bash
# Builds the default sandbox image with no registry: debootstrap a minimal Debian (bash,
# coreutils, git, python3) into a folder, `docker import` it, and tag it by a content hash of
# this script, so a rebuild only happens when the recipe changes.
#
#   scripts/build-sandbox-image.sh              build (or reuse) the image, print its tag
#   scripts/build-sandbox-image.sh --print-tag  print the tag the recipe produces, build nothing
#
# The tag is `uniagent-sandbox-base:<12 hex of sha256(this script)>`; it is also tagged
# `uniagent-sandbox-base:latest`. Needs root (debootstrap), the `debootstrap` package and a
# reachable Debian mirror: by default the first `URIs:`/`deb` entry for Debian in
# /etc/apt/sources.list*, else http://deb.debian.org/debian (override: UNIAGENT_DEBIAN_MIRROR).
#
# The image holds nothing of uniagent: the deployment copies the sandbox server into each
# container through the Docker API, so any image with /bin/sh works as well.
set -euo pipefail

SUITE="bookworm"
# Everything beyond the minbase variant (which already has bash, coreutils, dash as /bin/sh).
PACKAGES="git,python3,procps,ca-certificates"
REPO="uniagent-sandbox-base"

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
HASH="$(sha256sum "$SELF" | cut -c1-12)"
TAG="$REPO:$HASH"

if [ "${1:-}" = "--print-tag" ]; then
    echo "$TAG"
    exit 0
fi

if docker image inspect "$TAG" >/dev/null 2>&1; then
    docker tag "$TAG" "$REPO:latest"
    echo "$TAG"
    exit 0
fi

mirror() {
    if [ -n "${UNIAGENT_DEBIAN_MIRROR:-}" ]; then
        echo "$UNIAGENT_DEBIAN_MIRROR"
        return
    fi
    local found
    found="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
        | grep -Eo '(https?://[^ ]*/debian)/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)"
    echo "${found:-http://deb.debian.org/debian}"
}

if ! command -v debootstrap >/dev/null 2>&1; then
    echo "build-sandbox-image: debootstrap is missing (apt-get install debootstrap)" >&2
    exit 1
fi

MIRROR="$(mirror)"
WORK="$(mktemp -d /var/tmp/uniagent-image.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
ROOTFS="$WORK/rootfs"
echo "build-sandbox-image: debootstrap $SUITE from $MIRROR into $ROOTFS" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    tail -n 30 "$WORK/debootstrap.log" >&2
    exit 1
}
# Smaller image: no package caches, docs or locales beyond what the tools need.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/*
mkdir -p "$ROOTFS/work"
tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'WORKDIR /work' \
    --change 'CMD ["/bin/bash"]' \
    --message "uniagent sandbox base ($SUITE minbase + $PACKAGES)" \
    - "$TAG" >/dev/null
docker tag "$TAG" "$REPO:latest"
echo "$TAG"
