#!/bin/bash
# Paths without parent pointers: `xfskit bulkstat --paths` (every
# directory read once and indexed, then the scan) against xfs_ncheck's way,
# `xfs_db -r -c 'blockget -n' -c ncheck` (xfsprogs 7.2 beside the project,
# else Debian's), and `find -printf '%i %p'` on the kernel's loop mount,
# on the image of bench/bulkstat.sh (mkfs.xfs 6.1: no parent pointers),
# cold cache and warm.
#
# Usage (as root):  bench/ncheck.sh       N=200000 DIRS=200 bench/ncheck.sh
#   RUNS    runs of each measurement, the median is shown (default 3)
#   MEMORY  xfskit's --memory (default: its own, 256m)
set -euo pipefail

N=${N:-1000000}
DIRS=${DIRS:-1000}
IMG=${IMG:-/var/tmp/xfskit-bench-n$N-d$DIRS.img}
RUNS=${RUNS:-3}
MNT=${MNT:-/var/tmp/xfskit-bench-ncheck.mnt}

[ "$(id -u)" = 0 ] || { echo "bench/ncheck.sh: needs root (loop mount, drop_caches)" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ ! -e "$IMG.done" ]; then
    N=$N DIRS=$DIRS RUNS=1 bash bench/bulkstat.sh > /dev/null
fi
cargo build --release -q -p xfskit-cli
XFSKIT=$PWD/target/release/xfskit
XFS_DB=xfs_db
[ -x ../shared/xfsprogs-7.2/bin/xfs_db ] && XFS_DB=$PWD/../shared/xfsprogs-7.2/bin/xfs_db
mkdir -p "$MNT"
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; true; }
trap cleanup EXIT
MEM=()
[ -n "${MEMORY:-}" ] && MEM=(--memory "$MEMORY")

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
LOG=$(mktemp)
trap 'cleanup; rm -f "$LOG"' EXIT
# run MODE NAME CMD...: one timed run; appends "NAME MODE seconds rss_kib".
run() {
    local mode=$1 name=$2 s m; shift 2
    if [ "$mode" = cold ]; then drop; else "$@" > /dev/null 2>&1 || true; fi
    /usr/bin/time -f '%e %M' -o /tmp/xfskit-bench-ncheck.time "$@" > /dev/null 2>&1 || {
        echo "bench/ncheck.sh: '$*' failed" >&2; exit 1; }
    read -r s m < /tmp/xfskit-bench-ncheck.time
    echo "$name $mode $s $m" >> "$LOG"
}
median() {
    awk -v n="$1" -v m="$2" '$1 == n && $2 == m {print $3, $4}' "$LOG" | sort -n |
        awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'
}
# The kernel's way: mount, list every inode number and path, unmount.
FIND="mount -o loop,ro '$IMG' '$MNT' && find '$MNT' -printf '%i %p\\n' > /dev/null; umount '$MNT'"
# The counts agree before anything is timed: paths printed by each.
ours=$("$XFSKIT" bulkstat --paths "${MEM[@]}" "$IMG" | grep -c $'^\t')
theirs=$("$XFS_DB" -r -c 'blockget -n' -c ncheck "$IMG" | wc -l)
echo "paths: xfskit $ours, xfs_db ncheck $theirs (ncheck leaves out the root)"
for mode in cold warm; do
    for ((i = 0; i < RUNS; i++)); do
        run $mode xfskit "$XFSKIT" bulkstat --paths "${MEM[@]}" "$IMG"
        run $mode ncheck "$XFS_DB" -r -c 'blockget -n' -c ncheck "$IMG"
        if [ $mode = cold ]; then run $mode find sh -c "$FIND"; fi
    done
done
printf '%-34s %6s %9s %10s %9s\n' "method" "cache" "seconds" "peak RSS" "xfskit is"
for mode in cold warm; do
    read -r ks km < <(median xfskit $mode)
    read -r ns nm < <(median ncheck $mode)
    printf '%-34s %6s %9.2f %8d M %9s\n' "xfskit bulkstat --paths" $mode "$ks" $((km / 1024)) ""
    printf '%-34s %6s %9.2f %8d M %8.2fx\n' "xfs_db blockget -n; ncheck" $mode "$ns" $((nm / 1024)) \
        "$(echo "$ns / $ks" | bc -l)"
    if [ $mode = cold ]; then
        read -r fs _ < <(median find cold)
        printf '%-34s %6s %9.2f %10s %8.2fx\n' "mount + find -printf '%i %p'" cold "$fs" "" \
            "$(echo "$fs / $ks" | bc -l)"
    fi
done
echo "($N files in $DIRS directories, $(nproc) CPUs, median of $RUNS alternating runs; \"xfskit is\": times faster)"
