#!/bin/bash
# Metadump benchmark: `xfskit metadump` against `xfs_metadump` (xfsprogs
# 7.2) with the same options, on one image of N files in DIRS directories,
# made by `xfskit build` from a generated tree (kept in $IMG for later
# runs), warm cache (one untimed run of each first). Three option sets:
# `-o -a` (names kept, whole blocks), `-o` (stale bytes zeroed) and none
# (zeroed and obfuscated, both tools' defaults). Runs alternate between the
# two tools so that both see the same load; the median of RUNS runs is
# shown, with the ratio. The dumps are restored by xfs_mdrestore: with -o
# the two restored images are compared byte for byte; obfuscated (random)
# ones are each checked by xfs_repair -n.
#
# Usage:  bench/metadump.sh        N=20000 DIRS=20 RUNS=5 bench/metadump.sh
#   XFSPROGS72  xfsprogs 7.2's bin directory (default ../shared/xfsprogs-7.2/bin)
#   XFSKIT      an xfskit binary to use instead of building the release one
#   MODES       option sets to run, '|'-separated (default "-o -a|-o|")
set -euo pipefail

N=${N:-200000}
DIRS=${DIRS:-200}
RUNS=${RUNS:-3}
cd "$(dirname "$0")/.."
XFSPROGS72=${XFSPROGS72:-$PWD/../shared/xfsprogs-7.2/bin}
WORK=${WORK:-/var/tmp/xfskit-bench-metadump-n$N-d$DIRS}
IMG=$WORK/fs.img
[ -x "$XFSPROGS72/xfs_metadump" ] || { echo "bench/metadump.sh: no xfs_metadump in $XFSPROGS72" >&2; exit 1; }
if [ -z "${XFSKIT:-}" ]; then
    cargo build --release -q -p xfskit-cli
    XFSKIT=${CARGO_TARGET_DIR:-$PWD/target}/release/xfskit
fi
MODES=${MODES:--o -a|-o|}
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
trap 'rm -f "$LOG" "$LOG.t" "$WORK"/*.md "$WORK"/r*.img' EXIT
run() {
    local name=$1; shift
    /usr/bin/time -f '%e %M' -o "$LOG.t" "$@" > /dev/null
    read -r s m < "$LOG.t"
    echo "$name $s $m" >> "$LOG"
}
median() { awk -v n="$1" '$1 == n {print $2, $3}' "$LOG" | sort -n |
    awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'; }
echo "image: $N files in $DIRS directories ($(du -h --apparent-size "$IMG" | cut -f1))"
printf '%-10s %-14s %9s %10s %8s\n' options method seconds "peak RSS" dump
IFS='|' read -r -a modes <<< "$MODES"
# A trailing empty set is dropped by read: keep it.
[[ "$MODES" == *"|" ]] && modes+=("")
for mode in "${modes[@]}"; do
    read -r -a opt <<< "$mode"
    tag=${mode// /}; tag=${tag:-none}
    : > "$LOG"
    "$XFSKIT" metadump "${opt[@]}" "$IMG" "$WORK/x.md"
    "$XFSPROGS72/xfs_metadump" "${opt[@]}" "$IMG" "$WORK/p.md" 2> /dev/null
    for ((i = 0; i < RUNS; i++)); do
        run xfskit "$XFSKIT" metadump "${opt[@]}" "$IMG" "$WORK/x.md"
        run xfs_metadump "$XFSPROGS72/xfs_metadump" "${opt[@]}" "$IMG" "$WORK/p.md"
    done
    "$XFSPROGS72/xfs_mdrestore" "$WORK/x.md" "$WORK/rx.img"
    "$XFSPROGS72/xfs_mdrestore" "$WORK/p.md" "$WORK/rp.img"
    if [[ " ${opt[*]} " == *" -o "* ]]; then
        if cmp -s "$WORK/rx.img" "$WORK/rp.img"; then same="restored images identical"; else same="restored images DIFFERENT"; fi
    else
        rx=clean; rp=clean
        "$XFSPROGS72/xfs_repair" -n "$WORK/rx.img" > /dev/null 2>&1 || rx=NOT-CLEAN
        "$XFSPROGS72/xfs_repair" -n "$WORK/rp.img" > /dev/null 2>&1 || rp=NOT-CLEAN
        same="xfs_repair -n of the restored images: xfskit's $rx, xfs_metadump's $rp"
    fi
    read -r xs xm < <(median xfskit)
    read -r ps pm < <(median xfs_metadump)
    printf '%-10s %-14s %9s %6s MiB %8s\n' "${mode:-(none)}" xfskit "$xs" "$((xm / 1024))" "$(du -h "$WORK/x.md" | cut -f1)"
    printf '%-10s %-14s %9s %6s MiB %8s\n' "${mode:-(none)}" xfs_metadump "$ps" "$((pm / 1024))" "$(du -h "$WORK/p.md" | cut -f1)"
    awk -v x="$xs" -v p="$ps" -v r="$RUNS" -v same="$same" -v t="$tag" 'BEGIN { printf "  %s: xfskit is %.2fx as fast as xfs_metadump 7.2 (median of %d warm runs); %s\n", t, p / x, r, same }'
    rm -f "$WORK/rx.img" "$WORK/rp.img"
done
