#!/usr/bin/env bash
# release-chart.sh VERSION IMAGES OUT packages the chart of a release into
# OUT/nodewise-X.Y.Z.tgz and prints the package's path. From a copy of
# deploy/charts/nodewise it stamps Chart.yaml (version X.Y.Z, appVersion
# VERSION) and writes into values.yaml, for each image block whose repository
# ends in /NAME, the repository and manifest digest of IMAGES/NAME.tar (an OCI
# archive of make images, which must be tagged VERSION). The package then
# renders every image as repository:VERSION@sha256:…, which it checks.
# make release runs it on the images it built; TestChartOnRealNode runs it on
# the images make test built and installs the package. HELM names helm
# (default bin/helm).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: release-chart.sh VERSION IMAGES OUT"
version=${1:?$usage} images=${2:?$usage} out=${3:?$usage}
helm=${HELM:-$root/bin/helm}
names=(orchestrator nodeagent probe)
die() { echo "release-chart.sh: $*" >&2; exit 1; }
[[ $version =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]] || die "VERSION $version is not vX.Y.Z"
semver=${BASH_REMATCH[1]}

# Each image's name and digest, from its archive's index.json (one manifest).
declare -A digest repo
for name in "${names[@]}"; do
	tar=$images/$name.tar
	[ -f "$tar" ] || die "no $tar: run make images VERSION=$version"
	index=$(tar -xOf "$tar" index.json) || die "$tar has no index.json: not an OCI archive"
	ds=$(grep -o '"digest": *"sha256:[0-9a-f]\{64\}"' <<<"$index" | grep -o 'sha256:[0-9a-f]*' || true)
	ref=$(grep -o '"org.opencontainers.image.ref.name": *"[^"]*"' <<<"$index" | sed 's/.*: *"\(.*\)"/\1/' || true)
	[ "$(wc -w <<<"$ds")" = 1 ] || die "$tar's index.json lists $(wc -w <<<"$ds") manifests, want one"
	[ "${ref##*/}" = "$name:$version" ] || die "$tar holds $ref, not …/$name:$version: run make images VERSION=$version"
	digest[$name]=$ds
	repo[$name]=${ref%:*}
done

# The stamped copy of the chart.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/deploy/charts/nodewise" "$work/"
chart=$work/nodewise
sed -i -e "s/^version: .*/version: $semver/" -e "s/^appVersion: .*/appVersion: $version/" "$chart/Chart.yaml"
pins=""
for name in "${names[@]}"; do pins+="$name=${repo[$name]}@${digest[$name]} "; done
# In each two-space-indented image block (repository, tag, digest, pullPolicy)
# of one of the images: its repository and digest. Every image must be found.
awk -v pins="$pins" '
	BEGIN { n = split(pins, p, " "); for (i = 1; i <= n; i++) { split(p[i], kv, "[=@]"); r[kv[1]] = kv[2]; d[kv[1]] = kv[3] } }
	/^  image:$/ { block = 1; name = ""; print; next }
	block && !/^    / { block = 0 }
	block && /^    repository: / { n = $2; sub(/.*\//, "", n); if (n in r) { name = n; sub(/repository: .*/, "repository: " r[n]) } }
	block && /^    digest: / && name != "" { sub(/digest: .*/, "digest: " d[name]); seen[name] = 1 }
	{ print }
	END { for (n in r) if (!(n in seen)) { print "no image block of " n " in values.yaml" >"/dev/stderr"; exit 1 } }
' "$chart/values.yaml" >"$work/values.yaml" || die "writing the digests into values.yaml failed"
mv "$work/values.yaml" "$chart/values.yaml"

mkdir -p "$out"
pkg=$("$helm" package "$chart" --destination "$out" | sed -n 's/.*saved it to: //p')
[ -f "$pkg" ] || die "helm package wrote no package"

# The package as Helm reads it: its appVersion, and every nodewise image rendered
# with the release's tag and digest (for the oldest Kubernetes the chart admits).
[ "$("$helm" show chart "$pkg" | sed -n 's/^appVersion: *//p')" = "$version" ] || die "$pkg's appVersion is not $version"
kube=$(sed -n 's/^kubeVersion: *">=\([0-9.]*\).*/\1/p' "$chart/Chart.yaml")
rendered=$("$helm" template nodewise "$pkg" --kube-version "$kube" | sed -n 's/^ *image: *//p' | tr -d '"' | sort -u)
for name in "${names[@]}"; do
	want=${repo[$name]}:$version@${digest[$name]}
	grep -qxF "$want" <<<"$rendered" || die "$pkg renders no image $want (it renders: $(tr '\n' ' ' <<<"$rendered"))"
	others=$(grep -F "${repo[$name]}" <<<"$rendered" | grep -vxF "$want" || true)
	[ -z "$others" ] || die "$pkg renders $others beside $want"
done
echo "$pkg"
