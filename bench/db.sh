#!/bin/bash
# Inspection benchmark: `xfskit db IMAGE CMD` against `xfs_db -r -c CMD`
# (xfsprogs 7.2) for freesp, frag and fsmap, on the image of bench/metadump.sh (N files in
# DIRS directories made by `xfskit build` at 7.2's defaults, rmap btree
# on; made by that script when missing), warm cache. Each pair prints the
# same (the test suite compares them line by line); here only the time
# and peak memory are compared. Runs alternate; the median of RUNS runs
# is shown, with the ratio.
#
# Usage:  bench/db.sh        N=20000 DIRS=20 RUNS=5 bench/db.sh
#   XFSPROGS72  xfsprogs 7.2's bin directory (default ../shared/xfsprogs-7.2/bin)
set -euo pipefail

N=${N:-200000}
DIRS=${DIRS:-200}
RUNS=${RUNS:-3}
cd "$(dirname "$0")/.."
XFSPROGS72=${XFSPROGS72:-$PWD/../shared/xfsprogs-7.2/bin}
WORK=${WORK:-/var/tmp/xfskit-bench-metadump-n$N-d$DIRS}
IMG=$WORK/fs.img
[ -x "$XFSPROGS72/xfs_db" ] || { echo "bench/db.sh: no xfs_db in $XFSPROGS72" >&2; exit 1; }
if [ ! -e "$IMG.done" ]; then
    N=$N DIRS=$DIRS RUNS=1 bash bench/metadump.sh > /dev/null
fi
cargo build --release -q -p xfskit-cli
XFSKIT=${CARGO_TARGET_DIR:-$PWD/target}/release/xfskit
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# run NAME CMD...: one warm run timed to the microsecond (bash's clock),
# its peak memory from /usr/bin/time.
run() {
    local name=$1 t0 t1 s m; shift
    "$@" > /dev/null 2>&1 || true
    t0=$EPOCHREALTIME
    /usr/bin/time -f '%M' -o "$LOG.t" "$@" > /dev/null 2>&1 || {
        echo "bench/db.sh: '$*' failed" >&2; exit 1; }
    t1=$EPOCHREALTIME
    read -r m < "$LOG.t"
    s=$(echo "$t1 - $t0" | bc -l)
    echo "$name $s $m" >> "$LOG"
}
median() {
    awk -v n="$1" '$1 == n {print $2, $3}' "$LOG" | sort -n |
        awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'
}
DB=$XFSPROGS72/xfs_db
for ((i = 0; i < RUNS; i++)); do
    run x-freesp "$XFSKIT" db "$IMG" freesp -s
    run d-freesp "$DB" -r -c 'freesp -s' "$IMG"
    run x-frag "$XFSKIT" db "$IMG" frag
    run d-frag "$DB" -r -c frag "$IMG"
    run x-fsmap "$XFSKIT" db "$IMG" fsmap
    run d-fsmap "$DB" -r -c fsmap "$IMG"
    run x-fsmap1k "$XFSKIT" db "$IMG" fsmap 1000 2000
    run d-fsmap1k "$DB" -r -c 'fsmap 1000 2000' "$IMG"
done
rm -f "$LOG.t"
printf '%-28s %9s %9s %10s %9s %10s\n' "command" "xfskit s" "peak" "xfsprogs s" "peak" "xfskit is"
for c in freesp frag fsmap fsmap1k; do
    read -r xs xm < <(median x-$c)
    read -r ds dm < <(median d-$c)
    case $c in
        freesp) what="db freesp -s" ;;
        frag) what="db frag" ;;
        fsmap) what="db fsmap (whole fs)" ;;
        fsmap1k) what="db fsmap 1000 2000" ;;
    esac
    printf '%-28s %9.3f %7d M %10.3f %7d M %8.2fx\n' "$what" "$xs" $((xm / 1024)) "$ds" $((dm / 1024)) \
        "$(echo "$ds / $xs" | bc -l)"
done
echo "($N files in $DIRS directories, $(nproc) CPUs, warm cache, median of $RUNS alternating runs, each timed with the process start included; \"xfskit is\": times faster)"
