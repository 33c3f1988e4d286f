#!/usr/bin/env bash
# Import a minimal Debian bookworm (Python 3.11) as a local image, from Debian's package mirror
# alone: the base of leakbed's images where no container registry is reachable.
#   leakbed/deploy/base/debian-rootfs.sh ENGINE TAG     e.g. podman localhost/leakbed-debian:bookworm
set -euo pipefail
engine=${1:?engine (podman or docker)}
tag=${2:?image tag}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "debian-rootfs: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }
root=$(mktemp -d /var/tmp/leakbed-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror" >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | "$engine" import - "$tag" >/dev/null
echo "$tag"
