#!/bin/bash
# Check benchmark: `xfskit check` against `xfs_repair -n` on the image of
# bench/bulkstat.sh (N files in DIRS directories; made by that script if
# missing), cold cache (page cache dropped before each run) and warm.
#
# Usage (as root):  bench/check.sh       N=200000 DIRS=200 bench/check.sh
#   RUNS  runs of each measurement, the best is shown (default 3)
set -euo pipefail

N=${N:-1000000}
DIRS=${DIRS:-1000}
IMG=${IMG:-/var/tmp/xfskit-bench-n$N-d$DIRS.img}
RUNS=${RUNS:-3}

[ "$(id -u)" = 0 ] || { echo "bench/check.sh: needs root (drop_caches)" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ ! -e "$IMG.done" ]; then
    echo "no image yet: run bench/bulkstat.sh (N=$N DIRS=$DIRS) first" >&2
    exit 1
fi
cargo build --release -q -p xfskit-cli
XFSKIT=$PWD/target/release/xfskit

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# best MODE CMD...: prints the best wall time and peak RSS (KiB) of RUNS runs
best() {
    local mode=$1; shift
    local b="" rss="" i s m
    for ((i = 0; i < RUNS; i++)); do
        if [ "$mode" = cold ]; then drop; else "$@" > /dev/null 2>&1 || true; fi
        /usr/bin/time -f '%e %M' -o /tmp/xfskit-bench-check.time "$@" > /dev/null 2>&1 || {
            echo "bench/check.sh: '$*' found problems or failed" >&2; exit 1; }
        read -r s m < /tmp/xfskit-bench-check.time
        if [ -z "$b" ] || [ "$(echo "$s < $b" | bc -l)" = 1 ]; then b=$s; rss=$m; fi
    done
    echo "$b $rss"
}

printf '%-22s %6s %9s %10s %9s\n' "method" "cache" "seconds" "peak RSS" "xfskit is"
for mode in cold warm; do
    read -r ks km < <(best $mode "$XFSKIT" check "$IMG")
    read -r rs rm < <(best $mode xfs_repair -n "$IMG")
    printf '%-22s %6s %9.2f %8d M %9s\n' "xfskit check" $mode "$ks" $((km / 1024)) ""
    printf '%-22s %6s %9.2f %8d M %8.2fx\n' "xfs_repair -n" $mode "$rs" $((rm / 1024)) \
        "$(echo "$rs / $ks" | bc -l)"
done
echo "($N files in $DIRS directories, $(nproc) CPUs, best of $RUNS; \"xfskit is\": times faster)"
