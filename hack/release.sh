#!/usr/bin/env bash
# release.sh VERSION OUT [REGISTRY] writes the release VERSION into OUT from
# what make release built (bin/ and bin/images, all carrying VERSION):
#   nodewise-X.Y.Z.tgz            the chart, images pinned by digest (release-chart.sh)
#   images/NAME.tar               the images, OCI archives tagged VERSION
#   kubectl-nodewise_OS_ARCH.tar.gz, nodewise.yaml   the krew archives and manifest
#   SHA256SUMS                    the sha256 of every file above
# With REGISTRY (host:port) it pushes the images there, as REGISTRY/nodewise/
# NAME:VERSION with the digests the chart names (a mirror of ghcr.io serves
# them under the chart's names), and the chart as an OCI artifact,
# oci://REGISTRY/charts/nodewise (plain HTTP for a registry on loopback).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: release.sh VERSION OUT [REGISTRY]} out=${2:?} registry=${3:-}
helm=${HELM:-$root/bin/helm}
die() { echo "release.sh: $*" >&2; exit 1; }

# The binaries the images hold say the version the chart will.
# (nodewise version --client: "Client: nodewise vX.Y.Z (goN)"; the others'
# --version: "NAME vX.Y.Z".)
got=$("$root/bin/nodewise" version --client | awk '{print $3}')
[ "$got" = "$version" ] || die "bin/nodewise version says $got, not $version: run make release VERSION=$version"
for name in orchestrator nodeagent probe; do
	got=$("$root/bin/$name" --version | awk '{print $2}')
	[ "$got" = "$version" ] || die "bin/$name --version says $got, not $version: run make release VERSION=$version"
done

rm -rf "$out"
mkdir -p "$out/images"
pkg=$(HELM=$helm "$root/hack/release-chart.sh" "$version" "$root/bin/images" "$out")
for name in orchestrator nodeagent probe; do cp "$root/bin/images/$name.tar" "$out/images/"; done
"$root/hack/krew.sh" "$version" "$out"
(cd "$out" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | sort | xargs sha256sum >SHA256SUMS)

if [ -n "$registry" ]; then
	plain=() tls=true
	case $registry in 127.0.0.1:* | localhost:* | \[::1\]:*) plain=(--plain-http) tls=false ;; esac
	# buildah (make images' builder) copies each archive's manifest unchanged:
	# the pushed digest is the archive's, which the chart pins; checked.
	store=$(mktemp -d)
	trap 'rm -rf "$store"' EXIT
	b=(buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs)
	for name in orchestrator nodeagent probe; do
		index=$(tar -xOf "$out/images/$name.tar" index.json)
		ref=$(grep -o '"org.opencontainers.image.ref.name": *"[^"]*"' <<<"$index" | sed 's/.*: *"\(.*\)"/\1/')
		want=$(grep -o '"digest": *"sha256:[0-9a-f]*"' <<<"$index" | grep -o 'sha256:[0-9a-f]*')
		"${b[@]}" pull -q "oci-archive:$out/images/$name.tar" >/dev/null
		"${b[@]}" push -q --tls-verify=$tls --digestfile "$store/digest" "$ref" "docker://$registry/${ref#*/}"
		[ "$(cat "$store/digest")" = "$want" ] || die "$registry/${ref#*/} was pushed as $(cat "$store/digest"), not $want"
		echo "pushed $registry/${ref#*/}@$want"
	done
	"$helm" push "$pkg" "oci://$registry/charts" "${plain[@]}"
fi
echo "release $version in ${out#"$root"/}:"
sed 's/^/  /' "$out/SHA256SUMS"
