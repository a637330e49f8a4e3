#!/usr/bin/env bash
# Builds the container image from Dockerfile with buildah (or podman),
# offline: the base is scratch and the binary is built beforehand
# (make image-bin). Writes a docker-archive next to the binary for
# `docker load`, and prints the image's size.
#   IMAGE                 name:tag (default localhost/sluice:latest)
#   IMAGE_STORAGE_ROOT    a private containers storage (tests); default: the system's
set -euo pipefail
cd "$(dirname "$0")/.."

image=${IMAGE:-localhost/sluice:latest}
archive=bin/image/sluice-image.tar

if command -v buildah >/dev/null 2>&1; then
	tool=buildah
elif command -v podman >/dev/null 2>&1; then
	tool=podman
else
	echo "image: neither buildah nor podman is installed (Debian: apt-get install buildah)" >&2
	exit 1
fi

# vfs works everywhere, also inside an unprivileged container without
# overlayfs; chroot isolation needs no user namespaces for RUN-less builds.
storage=(--storage-driver vfs)
if [ -n "${IMAGE_STORAGE_ROOT:-}" ]; then
	storage+=(--root "$IMAGE_STORAGE_ROOT/root" --runroot "$IMAGE_STORAGE_ROOT/run")
fi

for f in bin/image/sluice bin/image/ca-certificates.crt; do
	[ -f "$f" ] || { echo "image: $f is missing: run make image-bin first" >&2; exit 1; }
done

# docker format: the OCI image config has no HEALTHCHECK.
if [ "$tool" = buildah ]; then
	buildah "${storage[@]}" bud --isolation chroot --format docker --pull-never -f Dockerfile -t "$image" .
else
	podman "${storage[@]}" build --format docker --pull=never -f Dockerfile -t "$image" .
fi
rm -f "$archive"
$tool "${storage[@]}" push "$image" "docker-archive:$archive:$image" >/dev/null
size=$($tool "${storage[@]}" images --format '{{.Size}}' "$image" | head -n1)
echo "image: $image ($size); docker load -i $archive"
