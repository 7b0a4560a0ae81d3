#!/usr/bin/env bash
# check-setup.sh fails when a make target the README tells people to run lacks
# the set-up it needs, or builds a tool it does not use. It reads `make -n
# TARGET` (which runs nothing) for the `@: set-up: ...` markers the set-up
# recipes print: deps, deps-run, build, tool:NAME.
#
# Every target the README names must be listed below with what it needs; a new
# one fails the check until someone says what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
readme=${README:-README.md}

declare -A needs=(
	[demo]="deps-run build tool:etcd tool:kubernetes"
	[test]="deps tool:etcd tool:kubernetes tool:prometheus tool:alertmanager tool:istioctl tool:registry tool:kubelet tool:helm tool:staticcheck images deps-images"
	[bench]="deps build tool:etcd tool:kubernetes tool:prometheus"
	[bench-disruption]="deps-run tool:etcd tool:kubernetes"
	[bench-surge]="deps-run tool:etcd tool:kubernetes"
	[bench-scale]="deps tool:etcd tool:kubernetes"
	[bench-ebpf]="deps"
	[bench-baseline]="deps tool:etcd tool:kubernetes"
	[bench-reconcile]=""
	[generate]="deps"
	[build]=""
	[tools]="tool:etcd tool:kubernetes tool:prometheus tool:alertmanager tool:istioctl tool:registry tool:kubelet"
	[deps]=""
	[deps-run]=""
	[demo-tools]="tool:etcd tool:kubernetes"
	[check-setup]=""
	[lint]="tool:staticcheck"
	[help]=""
	[images]="build deps-images"
	[image-context]="build"
	[deps-images]=""
	[krew]=""
	[release]="build deps-images images tool:helm"
	[chart-check]="tool:helm"
	[chart-package]="tool:helm"
	[chart-sync]=""
)
# What a target must not build: the demo has no use for Prometheus, Alertmanager or istioctl.
declare -A forbids=(
	[demo]="tool:prometheus tool:alertmanager tool:istioctl deps"
)

# make targets named in backticks (`make build tools`) or at the start of a
# line of a code block (make demo   # ...).
targets=$( {
	grep -o '`make [a-z][a-z -]*`' "$readme" | tr -d '`' || true
	grep -E '^make [a-z]' "$readme" | sed 's/#.*//' || true
} | awk '{for (i = 2; i <= NF; i++) print $i}' | sort -u)

status=0
for t in $targets; do
	if [[ ! -v needs[$t] ]]; then
		echo "check-setup: $readme names 'make $t', but hack/check-setup.sh does not say what set-up it needs" >&2
		status=1
		continue
	fi
	if ! plan=$(make -n --no-print-directory "$t" 2>&1); then
		echo "check-setup: make -n $t fails: $(head -n1 <<<"$plan")" >&2
		status=1
		continue
	fi
	for n in ${needs[$t]}; do
		if ! grep -qxF ": set-up: $n" <<<"$plan"; then
			echo "check-setup: 'make $t' does not run its set-up '$n' (add it to the target's prerequisites)" >&2
			status=1
		fi
	done
	for n in ${forbids[$t]:-}; do
		if grep -qxF ": set-up: $n" <<<"$plan"; then
			echo "check-setup: 'make $t' runs '$n', which it does not use" >&2
			status=1
		fi
	done
done
exit $status
