#!/usr/bin/env bash
# build-tool.sh NAME builds the upstream binaries that tools/NAME/go.mod lists
# on its `tool` lines, from the Go module proxy, into bin/.tools/NAME-KEY, and
# links each binary as bin/BINARY. KEY hashes the module's go.mod and go.sum, so
# a pinned version change rebuilds and anything else reuses the cached build.
# Binaries of k8s.io/kubernetes carry its version (component-base/version, as
# its own Makefile sets), so /version and `kubelet --version` report v1.37.2,
# not v0.0.0-master: helm checks a chart's kubeVersion against it.
# Tools build with CGO_ENABLED=0, as `make build` does: the k8s.io packages
# both compile (client-go, apimachinery, at the same versions: tools/kubernetes
# and tools/kubelet require nodewise's versions of the modules they share) are
# then one entry in the Go build cache, so the second build reuses the first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:?usage: build-tool.sh NAME}
mod="$root/tools/$name"
[ -f "$mod/go.mod" ] || { echo "build-tool.sh: no tools module at tools/$name" >&2; exit 2; }
ldflags='-s -w'
k8s=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$mod/go.mod")
if [ -n "$k8s" ]; then
	minor=${k8s#v*.}
	minor=${minor%%.*}
	v=k8s.io/component-base/version
	ldflags="$ldflags -X $v.gitVersion=$k8s -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
fi
export CGO_ENABLED=0
key=$( (cat "$mod/go.mod" "$mod/go.sum"; [ ! -f "$mod/placeholders" ] || cat "$mod/placeholders"; [ -z "$k8s" ] || echo "$ldflags"; echo "CGO_ENABLED=$CGO_ENABLED") | sha256sum | cut -c1-12)
out="$root/bin/.tools/$name-$key"
if [ ! -f "$out/.done" ]; then
	echo "building $name from the Go module proxy into bin/ (cold: minutes; cached by version afterwards)" >&2
	rm -rf "$out.tmp"
	mkdir -p "$out.tmp"
	start=$(date +%s)
	# A module that embeds files its release build makes cannot build from
	# the module proxy as it is (Alertmanager's ui embeds ui/app/dist, which
	# npm makes). For each line "MODULE DIR" of tools/NAME/placeholders, a
	# copy of MODULE gets a placeholder page in DIR and replaces MODULE in
	# this build only (-modfile: go.mod stays as it is).
	modfile=()
	if [ -f "$mod/placeholders" ]; then
		src="$out.src"
		rm -rf "$src"
		trap 'rm -rf "$src"' EXIT
		mkdir -p "$src"
		cp "$mod/go.mod" "$src/build.mod"
		cp "$mod/go.sum" "$src/build.sum"
		while read -r m d; do
			case "$m" in '' | '#'*) continue ;; esac
			(cd "$mod" && go mod download "$m")
			copy="$src/$(echo "$m" | tr / _)"
			cp -r "$(cd "$mod" && go list -m -f '{{.Dir}}' "$m")" "$copy"
			chmod -R u+w "$copy"
			mkdir -p "$copy/$d"
			echo "<!doctype html><title>$m</title><p>Built without this page's assets (hack/build-tool.sh); the API answers." >"$copy/$d/index.html"
			go mod edit -modfile="$src/build.mod" -replace="$m=$copy"
		done <"$mod/placeholders"
		modfile=(-modfile="$src/build.mod")
	fi
	(cd "$mod" && go build "${modfile[@]}" -trimpath -ldflags="$ldflags" -o "$out.tmp/" tool)
	rm -rf "$out.src"
	# A main package at a /vN module root is named after its parent element.
	if [ "$name" = etcd ]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
	touch "$out.tmp/.done"
	rm -rf "$out"
	mv "$out.tmp" "$out"
	secs=$(( $(date +%s) - start ))
	echo "built $name in ${secs}s" >&2
	# For hack/cold-build.sh: this checkout built it (cold), and how long it took.
	mkdir -p "$root/bin/.cold"
	echo "$secs" >"$root/bin/.cold/$name"
fi
for f in "$out"/*; do
	ln -sfn "$f" "$root/bin/$(basename "$f")"
done
