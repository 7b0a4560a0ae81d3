#!/usr/bin/env bash
# krew.sh VERSION [DIR] builds kubectl-nodewise for each platform of
# deploy/krew/nodewise.yaml into DIR/kubectl-nodewise_OS_ARCH.tar.gz and
# writes DIR/nodewise.yaml: the manifest with VERSION and the archives' sha256.
# DIR defaults to dist/; make release passes bin/release.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: krew.sh VERSION [DIR]}
dist=${2:-$root/dist}
manifest=$(sed "s/VERSION/$version/g" "$root/deploy/krew/nodewise.yaml")
mkdir -p "$dist"
for platform in $(grep -o 'SHA256_[a-z0-9]*_[a-z0-9]*' "$root/deploy/krew/nodewise.yaml" | sed 's/^SHA256_//' | sort -u); do
	os=${platform%_*} arch=${platform#*_}
	work=$(mktemp -d)
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -C "$root" -trimpath \
		-ldflags "-s -w -X github.com/nodewise/nodewise/buildinfo.version=$version" \
		-o "$work/kubectl-nodewise" ./cmd/nodewise
	archive="$dist/kubectl-nodewise_${platform}.tar.gz"
	tar -C "$work" -czf "$archive" kubectl-nodewise
	rm -rf "$work"
	sum=$(sha256sum "$archive" | cut -d' ' -f1)
	manifest=${manifest//SHA256_$platform/$sum}
	echo "krew: $archive $sum" >&2
done
printf '%s\n' "$manifest" >"$dist/nodewise.yaml"
echo "krew: wrote $dist/nodewise.yaml" >&2
