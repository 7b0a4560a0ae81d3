#!/usr/bin/env bash
# ebpf-variant.sh SRC OUT [CFLAGS...]: compile a variant of bpf/src/nodewise.c
# (a copy with a change, or the source itself with -D flags) as bpf2go
# compiles the production build, for make bench-ebpf-ab BUILDS=OUT.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 SRC OUT [CFLAGS...]" >&2; exit 2; }
src=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
clang -O2 -g -Wall -Werror -mcpu=v3 -target bpfel -I"$root/bpf/src" "$@" -c "$src" -o "$out"
