#!/bin/bash
# Metadump benchmark: `xfskit metadump -o -a` against `xfs_metadump -o -a`
# (xfsprogs 7.2) on one image of N files in DIRS directories, made by
# `xfskit build` from a generated tree (kept in $IMG for later runs), warm
# cache (one untimed run of each first). Runs alternate between the two so
# that both see the same load; the median of RUNS runs is shown, with the
# ratio. Both dumps are restored by xfs_mdrestore and compared once.
#
# Usage:  bench/metadump.sh        N=20000 DIRS=20 RUNS=5 bench/metadump.sh
#   XFSPROGS72  xfsprogs 7.2's bin directory (default ../shared/xfsprogs-7.2/bin)
set -euo pipefail

N=${N:-200000}
DIRS=${DIRS:-200}
RUNS=${RUNS:-3}
cd "$(dirname "$0")/.."
XFSPROGS72=${XFSPROGS72:-$PWD/../shared/xfsprogs-7.2/bin}
WORK=${WORK:-/var/tmp/xfskit-bench-metadump-n$N-d$DIRS}
IMG=$WORK/fs.img
[ -x "$XFSPROGS72/xfs_metadump" ] || { echo "bench/metadump.sh: no xfs_metadump in $XFSPROGS72" >&2; exit 1; }
cargo build --release -q -p xfskit-cli
XFSKIT=${CARGO_TARGET_DIR:-$PWD/target}/release/xfskit
mkdir -p "$WORK"
if [ ! -e "$IMG.done" ]; then
    rm -rf "$WORK/src"
    python3 - "$WORK/src" "$N" "$DIRS" <<'PY'
import os, sys
root, n, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(dirs):
    os.makedirs(f"{root}/d{d:05}")
for i in range(n):
    with open(f"{root}/d{i % dirs:05}/file-{i:08}", "wb") as f:
        f.write(b"x" * (i % 3000))
PY
    "$XFSKIT" build -q -f "$WORK/src" "$IMG"
    rm -rf "$WORK/src"
    touch "$IMG.done"
fi
LOG=$(mktemp)
trap 'rm -f "$LOG" "$WORK"/*.md "$WORK"/r*.img' EXIT
run() {
    local name=$1 out=$2; shift 2
    /usr/bin/time -f '%e %M' -o "$LOG.t" "$@" > /dev/null
    read -r s m < "$LOG.t"
    echo "$name $s $m" >> "$LOG"
}
"$XFSKIT" metadump -o -a "$IMG" "$WORK/x.md"
"$XFSPROGS72/xfs_metadump" -o -a "$IMG" "$WORK/p.md"
for ((i = 0; i < RUNS; i++)); do
    run xfskit "$WORK/x.md" "$XFSKIT" metadump -o -a "$IMG" "$WORK/x.md"
    run xfs_metadump "$WORK/p.md" "$XFSPROGS72/xfs_metadump" -o -a "$IMG" "$WORK/p.md"
done
"$XFSPROGS72/xfs_mdrestore" "$WORK/x.md" "$WORK/rx.img"
"$XFSPROGS72/xfs_mdrestore" "$WORK/p.md" "$WORK/rp.img"
if cmp -s "$WORK/rx.img" "$WORK/rp.img"; then same=identical; else same=DIFFERENT; fi
median() { awk -v n="$1" '$1 == n {print $2, $3}' "$LOG" | sort -n |
    awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'; }
read -r xs xm < <(median xfskit)
read -r ps pm < <(median xfs_metadump)
echo "image: $N files in $DIRS directories ($(du -h --apparent-size "$IMG" | cut -f1)), dumps $(du -h "$WORK/x.md" | cut -f1)"
printf '%-14s %9s %10s\n' method seconds "peak RSS"
printf '%-14s %9s %7s MiB\n' "xfskit" "$xs" "$((xm / 1024))"
printf '%-14s %9s %7s MiB\n' "xfs_metadump" "$ps" "$((pm / 1024))"
awk -v x="$xs" -v p="$ps" -v r="$RUNS" -v same="$same" 'BEGIN { printf "xfskit is %.2fx as fast as xfs_metadump 7.2 (median of %d warm runs); restored images %s\n", p / x, r, same }'
