#!/usr/bin/env bash
# istio-cni-image.sh BUILDER [NAME:TAG...] packs the real istio-cni (bin/install-cni
# and bin/istio-cni, built from istio.io/istio by make tool-istioctl; install-cni
# rebuilt with one path changed, below) into
# bin/images/istio-cni.tar, an OCI archive FROM scratch laid out as Istio's
# install-cni image is: install-cni in /usr/local/bin, the plugin in
# /opt/cni/bin (which install-cni copies to the node), and the binaries its
# in-pod redirection runs, copied from this Debian host with the libraries ldd
# names: nft (its nftables backend) and iptables, legacy and nft
# (xtables-{legacy,nft}-multi with their extensions, its iptables backend).
# Tagged ghcr.io/nodewise/istio-cni:dev unless NAME:TAGs are given.
#
# Beside it, the builds a NodeRollout of istio-cni rolls between
# (TestRealIstioCNIRolloutOnRealNode), each bin/images/istio-cni-TAG.tar
# tagged ghcr.io/nodewise/istio-cni:TAG, from the same source stamped with
# Istio's version variables (pkg/version's buildVersion: the version
# install-cni logs and the plugin prints) as TAG: 1.28.1 and 1.28.2 are
# healthy; 1.28.3 is faulty, built with -overlay replacing one file so that
# its start-up reconciliation of the pods already enrolled deletes their
# in-pod rules instead of writing them. Only the link (and for 1.28.3 the
# overlaid package) is redone: the Go build cache holds the rest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
builder=${1:?usage: istio-cni-image.sh BUILDER [NAME:TAG...]}
shift
refs=("$@")
[ ${#refs[@]} -gt 0 ] || refs=(ghcr.io/nodewise/istio-cni:dev)
out=$root/bin/images
ctx=$out/istio-cni-context
for b in install-cni istio-cni; do
	[ -x "$root/bin/$b" ] || { echo "istio-cni-image.sh: no bin/$b: run make tool-istioctl" >&2; exit 2; }
done
for b in nft xtables-legacy-multi xtables-nft-multi; do
	command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || { echo "istio-cni-image.sh: no $b on this host (Debian: apt-get install nftables iptables)" >&2; exit 2; }
done

rm -rf "$ctx"
fs=$ctx/rootfs
mkdir -p "$fs/usr/local/bin" "$fs/opt/cni/bin" "$fs/usr/sbin" "$fs/run" "$fs/tmp" "$fs/etc"
# install-cni finds the host's netns as /host/proc/1/ns/net (its pod netns
# finder, cni/pkg/nodeagent/podcgroupns_linux.go), and this machine's PID 1
# (the sandbox's init) may not be entered: the image's install-cni is built
# from the same pinned source with that one path read as
# /host/proc/self/ns/net, the same netns for its host-network pod (the
# chart's env ALLOW_SWITCH_TO_HOST_NS=false does the same for the rest).
src=$(cd "$root/tools/istioctl" && go list -m -f '{{.Dir}}' istio.io/istio)
# A copy of the module, since go build -overlay may not replace a file under
# GOMODCACHE (the faulty build's overlay below points into the copy too).
patched=$out/istio-cni-src
rm -rf "$patched"
cp -r "$src" "$patched"
chmod -R u+w "$patched"
f=$patched/cni/pkg/nodeagent/podcgroupns_linux.go
sed -i 's|fs.Stat(proc, path.Join("1", "ns", "net"))|fs.Stat(proc, path.Join("self", "ns", "net"))|' "$f"
grep -q '"self", "ns", "net"' "$f" || { echo "istio-cni-image.sh: $f no longer reads 1/ns/net: revisit the patch" >&2; exit 2; }
cp "$root/tools/istioctl/go.mod" "$patched/build.mod"
cp "$root/tools/istioctl/go.sum" "$patched/build.sum"
go mod edit -modfile="$patched/build.mod" -replace="istio.io/istio=$patched"
gobuild() { # OUT [go build flags and packages...]
	local o=$1
	shift
	(cd "$root/tools/istioctl" && CGO_ENABLED=0 go build -modfile="$patched/build.mod" -trimpath -o "$o" "$@")
}
gobuild "$fs/usr/local/bin/install-cni" -ldflags='-s -w' istio.io/istio/cni/cmd/install-cni
# The rollout's builds, in a directory each: install-cni and the plugin
# stamped with the build's version; the faulty one's overlay turns
# reconcileExistingPod's CreateInpodRules into DeleteInpodRules.
rollout_builds=(1.28.1 1.28.2 1.28.3)
faulty=1.28.3
builds=$out/istio-cni-builds
rm -rf "$builds"
mkdir -p "$builds/overlay"
n=$patched/cni/pkg/nodeagent/net_linux.go
sed '/^func (s \*NetServer) reconcileExistingPod/,/^}/ s|return s.trafficManager.CreateInpodRules(log, podCfg)|_ = podCfg; return s.trafficManager.DeleteInpodRules(log)|' "$n" >"$builds/overlay/net_linux.go"
grep -q 'return s.trafficManager.DeleteInpodRules(log)' "$builds/overlay/net_linux.go" || { echo "istio-cni-image.sh: $n's reconcileExistingPod no longer calls CreateInpodRules: revisit the faulty build" >&2; exit 2; }
printf '{"Replace":{"%s":"%s"}}\n' "$n" "$builds/overlay/net_linux.go" >"$builds/overlay.json"
bstart=$(date +%s)
for v in "${rollout_builds[@]}"; do
	flags=(-ldflags="-s -w -X istio.io/istio/pkg/version.buildVersion=$v")
	[ "$v" != "$faulty" ] || flags+=(-overlay="$builds/overlay.json")
	# One go build, both binaries (linked in parallel) into the build's directory.
	mkdir -p "$builds/$v"
	gobuild "$builds/$v/" "${flags[@]}" istio.io/istio/cni/cmd/install-cni istio.io/istio/cni/cmd/istio-cni
done
echo "istio-cni rollout builds ${rollout_builds[*]} (faulty $faulty): $(( $(date +%s) - bstart ))s"
rm -rf "$patched"
cp -L "$root/bin/istio-cni" "$fs/opt/cni/bin/istio-cni"
# A file and every library ldd resolves for it, at the same paths.
copy_with_libs() {
	local f=$1
	mkdir -p "$fs$(dirname "$f")"
	cp -L "$f" "$fs$f"
	ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
		[ -e "$fs$lib" ] && continue
		mkdir -p "$fs$(dirname "$lib")"
		cp -L "$lib" "$fs$lib"
	done
}
for b in nft xtables-legacy-multi xtables-nft-multi; do
	copy_with_libs "$(PATH=/usr/sbin:/sbin:$PATH command -v "$b")"
done
# iptables loads its matches and targets (REDIRECT, TPROXY, mark, ...) at run time.
xt=$(dirname "$(readlink -f "$(ldd "$(PATH=/usr/sbin:$PATH command -v xtables-nft-multi)" | grep -o '/[^ ]*libxtables[^ ]*')")")/xtables
for so in "$xt"/*.so; do copy_with_libs "$so"; done
for v in legacy nft; do
	for t in iptables ip6tables; do
		for s in "" -save -restore; do ln -s "xtables-$v-multi" "$fs/usr/sbin/$t-$v$s"; done
	done
done
# Plain iptables is the nft variant, as on Debian and in Istio's image.
for t in iptables ip6tables; do
	for s in "" -save -restore; do ln -s "xtables-nft-multi" "$fs/usr/sbin/$t$s"; done
done
printf 'root:x:0:0:root:/:/sbin/nologin\n' >"$fs/etc/passwd"
printf 'root:x:0:\n' >"$fs/etc/group"
printf 'hosts: files dns\n' >"$fs/etc/nsswitch.conf"
cat >"$ctx/Containerfile" <<'CF'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/install-cni"]
CF

epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
# pack ARCHIVE REF... packs the context's rootfs as bin/images/ARCHIVE tagged REFs.
pack() {
	local archive=$out/$1 start
	shift
	local refs=("$@")
	start=$(date +%s)
	rm -f "$archive"
	case $builder in
	buildah)
		local b=(buildah --root "$out/.storage" --runroot "$out/.run" --storage-driver vfs) tags=() r
		for r in "${refs[@]}"; do tags+=(-t "$r"); done
		"${b[@]}" bud --quiet --timestamp "$epoch" "${tags[@]}" -f "$ctx/Containerfile" "$ctx" >/dev/null
		"${b[@]}" push --quiet "${refs[0]}" "oci-archive:$archive:${refs[0]}"
		"${b[@]}" rmi --force "${refs[@]}" >/dev/null
		;;
	docker)
		SOURCE_DATE_EPOCH=$epoch docker buildx build --quiet -t "${refs[0]}" -f "$ctx/Containerfile" \
			--output "type=oci,dest=$archive" "$ctx" >/dev/null
		;;
	*)
		echo "istio-cni-image.sh: BUILDER must be buildah or docker, got $builder" >&2
		exit 2
		;;
	esac
	echo "bin/images/$(basename "$archive")  ${refs[0]}  ($(du -h "$archive" | cut -f1), $(( $(date +%s) - start ))s)"
}
pack istio-cni.tar "${refs[@]}"
for v in "${rollout_builds[@]}"; do
	cp "$builds/$v/install-cni" "$fs/usr/local/bin/install-cni"
	cp "$builds/$v/istio-cni" "$fs/opt/cni/bin/istio-cni"
	pack "istio-cni-$v.tar" "ghcr.io/nodewise/istio-cni:$v"
done
rm -rf "$builds"
