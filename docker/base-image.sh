#!/usr/bin/env bash
# docker/base-image.sh [IMAGE]: make sure the Debian 12 base image the Dockerfiles start from exists.
# Present already: nothing to do. Else pull it; where no container registry is reachable, build it from
# Debian's archive with debootstrap (minbase, plus the updates and security suites) and import it under the
# same name, so `FROM debian:12` works unchanged. DEBIAN_MIRROR picks the archive.
set -euo pipefail
image="${1:-debian:12}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "base-image: $image is present"
  exit 0
fi
if timeout 60 docker pull -q "$image" >/dev/null 2>&1; then
  echo "base-image: pulled $image"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "base-image: no registry and no debootstrap (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "base-image: debootstrap needs root" >&2; exit 1; }

root="$(mktemp -d /tmp/kiln-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "base-image: no registry for $image; debootstrap bookworm from $mirror (about a minute)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
security="${mirror%/debian}/debian-security"
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SOURCES
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$image" >/dev/null
echo "base-image: built $image with debootstrap"
