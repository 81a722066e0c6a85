#!/usr/bin/env bash
# Makes the base image the container image test builds on, since no image registry is reachable
# here: a minimal Debian bookworm root file system from Debian's mirror (debootstrap), imported
# into podman's store. Kept once made.
#
#   deploy/base-image.sh [IMAGE]     (default localhost/share-worker-base:bookworm)
set -euo pipefail

image=${1:-localhost/share-worker-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if podman image exists "$image"; then
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  cat "$root.log" >&2
  exit 1
}
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
tar -C "$root" -c . | podman import --quiet --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "deploy/base-image.sh: $image made from Debian bookworm ($mirror)" >&2
