#!/bin/bash
# Check benchmark: `xfskit check` against `xfs_repair -n` on the image of
# bench/bulkstat.sh (N files in DIRS directories; made by that script if
# missing), cold cache (page cache dropped before each run) and warm.
#
# Usage (as root):  bench/check.sh       N=200000 DIRS=200 bench/check.sh
#   RUNS  runs of each measurement, the median is shown (default 3)
#   BASE  another xfskit binary to compare with (optional)
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
# run MODE NAME CMD...: one timed run (cold: page cache dropped first;
# warm: after an untimed run); appends "NAME MODE seconds rss_kib" to $LOG
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
run() {
    local mode=$1 name=$2 s m; shift 2
    if [ "$mode" = cold ]; then drop; else "$@" > /dev/null 2>&1 || true; fi
    /usr/bin/time -f '%e %M' -o /tmp/xfskit-bench-check.time "$@" > /dev/null 2>&1 || {
        echo "bench/check.sh: '$*' found problems or failed" >&2; exit 1; }
    read -r s m < /tmp/xfskit-bench-check.time
    echo "$name $mode $s $m" >> "$LOG"
}
# median NAME MODE: median seconds and the peak RSS (KiB) of that run
median() {
    awk -v n="$1" -v m="$2" '$1 == n && $2 == m {print $3, $4}' "$LOG" | sort -n |
        awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'
}

# The runs alternate (xfskit, xfs_repair, [base,] xfskit, ...) so that
# both see the same load; the median of RUNS runs is shown.
for mode in cold warm; do
    for ((i = 0; i < RUNS; i++)); do
        run $mode xfskit "$XFSKIT" check "$IMG"
        run $mode repair xfs_repair -n "$IMG"
        if [ -n "${BASE:-}" ]; then run $mode base "$BASE" check "$IMG"; fi
        if [ $mode = cold ]; then
            # A bare read: every allocated byte of the image read once,
            # 1 MiB O_DIRECT reads from 8 threads, nothing checked.
            f=$(python3 bench/read_floor.py "$IMG" dio 8 | sed -n 's/.*: \([0-9.]*\) s (.*/\1/p')
            echo "floor cold $f 0" >> "$LOG"
        fi
    done
done
printf '%-22s %6s %9s %10s %9s\n' "method" "cache" "seconds" "peak RSS" "xfskit is"
for mode in cold warm; do
    read -r ks km < <(median xfskit $mode)
    read -r rs rm < <(median repair $mode)
    printf '%-22s %6s %9.2f %8d M %9s\n' "xfskit check" $mode "$ks" $((km / 1024)) ""
    if [ -n "${BASE:-}" ]; then
        read -r bs bm < <(median base $mode)
        printf '%-22s %6s %9.2f %8d M %8.2fx\n' "base ($BASE)" $mode "$bs" $((bm / 1024)) \
            "$(echo "$bs / $ks" | bc -l)"
    fi
    printf '%-22s %6s %9.2f %8d M %8.2fx\n' "xfs_repair -n" $mode "$rs" $((rm / 1024)) \
        "$(echo "$rs / $ks" | bc -l)"
done
read -r fs _ < <(median floor cold)
printf '%-22s %6s %9.2f %10s %8.2fx\n' "bare read (no check)" cold "$fs" "" \
    "$(echo "$fs / $(median xfskit cold | cut -d' ' -f1)" | bc -l)"
echo "(bare read: bench/read_floor.py IMG dio 8, every allocated byte of the image read once in 1 MiB O_DIRECT reads from 8 threads, nothing checked)"
echo "($N files in $DIRS directories, $(nproc) CPUs, median of $RUNS alternating runs; \"xfskit is\": times faster)"
