#!/usr/bin/env bash
# cold-build.sh TOOL... prints, after a make target that built some of the
# pinned tools cold, how long nodewise's own build and those upstream builds
# took: `cold build: nodewise Xs, upstream Ys (total/upstream R)`. The figures
# come from `make build` and hack/build-tool.sh (bin/.cold/NAME); only tools
# built since this run started (bin/.cold/start, make's cold-start) count, so a
# warm run prints nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
d=$root/bin/.cold
[ -f "$d/nodewise" ] && [ -f "$d/start" ] || exit 0
upstream=0 built=
for t in "$@"; do
	f=$d/$t
	[ -f "$f" ] && [ "$(stat -c %Y "$f")" -ge "$(cat "$d/start")" ] || continue
	upstream=$(( upstream + $(cat "$f") ))
	built="$built $t"
done
[ -n "$built" ] || exit 0
own=$(cat "$d/nodewise")
ratio=$(awk -v o="$own" -v u="$upstream" 'BEGIN { printf "%.2f", (u > 0 ? (o + u) / u : 0) }')
echo "cold build: nodewise ${own}s, upstream ${upstream}s (${built# }; total/upstream ${ratio})"
