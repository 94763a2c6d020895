#!/bin/bash
# Interleaved A/B timing of `xfskit build`: every binary builds every source
# once per round, in turn, so a machine whose speed drifts (this one moves
# 20-30% within an hour) slows all of them alike; prints the median wall and
# CPU (user + system) seconds per binary and source, and the fastest run.
#
# Usage: bench/ab.sh ROUNDS "SOURCE:SIZE ..." BINARY...
#   e.g. bench/ab.sh 8 "target/bench-build/t100k.tar:600M" old/xfskit target/release/xfskit
# Warm: read the sources once first (as bench/build.sh does with DROP=0).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,9p "$0"; exit 2; }
ROUNDS=$1; SOURCES=$2; shift 2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ab.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
for _ in $(seq "$ROUNDS"); do
    for s in $SOURCES; do
        src=${s%:*}; size=${s##*:}
        for bin in "$@"; do
            rm -f "$WORK/img"; sync
            /usr/bin/time -f "$bin $src %e %U %S" -a -o "$WORK/times.txt" \
                "$bin" build -q "$src" "$WORK/img" --size "$size" -f
        done
    done
done
python3 - "$WORK/times.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, s, e, u, sy = line.split()
    runs[(s, b)].append((float(e), float(u) + float(sy)))
for (s, b), v in sorted(runs.items()):
    print(f"{s}  {b}: wall {statistics.median(x[0] for x in v):.3f} s "
          f"(fastest {min(x[0] for x in v):.2f}), cpu {statistics.median(x[1] for x in v):.3f} s, "
          f"{len(v)} runs")
PY
