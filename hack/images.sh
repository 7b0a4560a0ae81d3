#!/usr/bin/env bash
# images.sh VERSION TAG REPO BUILDER NAME... builds each image NAME, a final
# stage of the Dockerfile FROM scratch, from the static binary in bin/ (make
# build), and writes it as an OCI archive bin/images/NAME.tar tagged REPO/NAME:TAG.
# BUILDER is buildah (its own vfs store under bin/images, so it needs neither a
# daemon, nor overlayfs, nor the host's image store) or docker (docker buildx).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: images.sh VERSION TAG REPO BUILDER NAME...}
tag=${2:?} repo=${3:?} builder=${4:?}
shift 4
out=$root/bin/images
ctx=$out/context

# The context: the binaries and a root filesystem written here, at build time.
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/etc/ssl/certs"
for name in "$@"; do
	[ -x "$root/bin/$name" ] || { echo "images.sh: no bin/$name: run make build first" >&2; exit 2; }
	cp "$root/bin/$name" "$ctx/$name"
done
printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || { echo "images.sh: no $ca (Debian: apt-get install ca-certificates)" >&2; exit 2; }
cp "$ca" "$ctx/rootfs/etc/ssl/certs/"
[ "${IMAGE_CONTEXT_ONLY:-}" ] && exit 0

# The commit time, not the build time, so the same commit gives the same digest.
epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
for name in "$@"; do
	ref=$repo/$name:$tag
	start=$(date +%s)
	rm -f "$out/$name.tar"
	case $builder in
	buildah)
		b=(buildah --root "$out/.storage" --runroot "$out/.run" --storage-driver vfs)
		"${b[@]}" bud --quiet --timestamp "$epoch" --build-arg VERSION="$version" \
			--target "$name" -t "$ref" -f "$root/Dockerfile" "$ctx" >/dev/null
		"${b[@]}" push --quiet "$ref" "oci-archive:$out/$name.tar:$ref"
		"${b[@]}" rmi --force "$ref" >/dev/null
		;;
	docker)
		SOURCE_DATE_EPOCH=$epoch docker buildx build --quiet --build-arg VERSION="$version" \
			--target "$name" -t "$ref" -f "$root/Dockerfile" \
			--output "type=oci,dest=$out/$name.tar" "$ctx" >/dev/null
		;;
	*)
		echo "images.sh: IMAGE_BUILDER must be buildah or docker, got $builder" >&2
		exit 2
		;;
	esac
	echo "bin/images/$name.tar  $ref  ($(du -h "$out/$name.tar" | cut -f1), $(( $(date +%s) - start ))s)"
done
