#!/bin/bash
# Journal benchmark: the same metadata-heavy workload (FILES files of
# 4 KiB in DIRS directories, then renames and unlinks, then a sync)
# through the library with the journal, without it, and on kernel XFS
# (loop mount), in one run; prints times, ratios and log bytes per
# operation (xfskit: the log writer's count; kernel: the log head's
# movement in /sys/fs/xfs/DEV/log/log_head_lsn).
#
# Usage (as root):  bench/journal.sh        FILES=20000 ROUNDS=1 bench/journal.sh
set -euo pipefail
FILES=${FILES:-100000}
DIRS=${DIRS:-100}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-4G}
WORK=${WORK:-/var/tmp/xfskit-bench-journal}

[ "$(id -u)" = 0 ] || { echo "bench/journal.sh: needs root (loop mount)" >&2; exit 1; }
cd "$(dirname "$0")/.."
cargo build --release -q -p xfskit --example journal_workload
KIT=$PWD/target/release/examples/journal_workload
mkdir -p "$WORK"
cc -O2 -o "$WORK/jworkload" bench/jworkload.c
rm -f "$WORK/base.img"
truncate -s "$SIZE" "$WORK/base.img"
mkfs.xfs -q -f "$WORK/base.img"
LOGBB=$(xfs_db -r -c "sb 0" -c "print logblocks blocksize" "$WORK/base.img" |
    awk '/logblocks/ {b=$3} /blocksize/ {s=$3} END {print b * s / 512}')

fresh() { cp --sparse=always "$WORK/base.img" "$WORK/img"; sync; }
LOG=$(mktemp)
trap 'rm -f "$LOG"; umount "$WORK/mnt" 2>/dev/null || true' EXIT
for ((r = 0; r < ROUNDS; r++)); do
    fresh
    echo "journal $($KIT "$WORK/img" "$FILES" "$DIRS")" >> "$LOG"
    xfs_repair -n "$WORK/img" > /dev/null || { echo "xfs_repair -n failed (journal)" >&2; exit 1; }
    fresh
    echo "nojournal $($KIT "$WORK/img" "$FILES" "$DIRS" --no-journal)" >> "$LOG"
    fresh
    mkdir -p "$WORK/mnt"
    mount -o loop "$WORK/img" "$WORK/mnt"
    dev=$(basename "$(findmnt -n -o SOURCE "$WORK/mnt")")
    h0=$(cat /sys/fs/xfs/$dev/log/log_head_lsn)
    out=$("$WORK/jworkload" "$WORK/mnt" "$FILES" "$DIRS")
    h1=$(cat /sys/fs/xfs/$dev/log/log_head_lsn)
    umount "$WORK/mnt"
    bytes=$(awk -v a="$h0" -v b="$h1" -v n="$LOGBB" 'BEGIN {
        split(a, x, ":"); split(b, y, ":");
        print ((y[1] - x[1]) * n + y[2] - x[2]) * 512 }')
    echo "kernel $out log_bytes=$bytes" >> "$LOG"
done
med() { grep "^$1 " "$LOG" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p" | sort -n |
    awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ops=$(med journal ops)
printf '%-28s %9s %12s %14s\n' "workload ($FILES files)" seconds "vs journal" "log bytes/op"
for w in journal nojournal kernel; do
    s=$(med $w seconds); b=$(med $w log_bytes)
    printf '%-28s %9s %12s %14s\n' "$w" "$s" \
        "$(awk -v a="$s" -v j="$(med journal seconds)" 'BEGIN {printf "%.2fx", a / j}')" \
        "$(awk -v b="${b:-0}" -v o="$ops" 'BEGIN {printf "%.0f", b / o}')"
done
