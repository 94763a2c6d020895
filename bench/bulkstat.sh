#!/bin/bash
# Bulkstat benchmark: xfskit (userspace, unmounted image) against the
# kernel's bulkstat ioctl and find(1) on the loop-mounted image, cold cache
# (page cache dropped before each run) and warm.
#
# Usage (as root):  bench/bulkstat.sh            N=200000 DIRS=200 bench/bulkstat.sh
#   N      files to create (default 1000000); DIRS directories (default 1000)
#   IMG    image path (default /var/tmp/xfskit-bench-nN-dDIRS.img, kept for
#          reruns; REBUILD=1 makes it again)
#   SIZE   image size (default 4G, sparse)
#   RUNS   runs of each measurement, the best is shown (default 3)
#
# Every output goes to /dev/null (the count of each method is taken once,
# untimed): the table compares scanning, not terminal or pipe speed.
# "kernel ioctl" is bench/kbulkstat.c, the bare XFS_IOC_BULKSTAT loop;
# "xfs_io bulkstat" is the same ioctl plus xfs_io's printing.
set -euo pipefail

N=${N:-1000000}
DIRS=${DIRS:-1000}
IMG=${IMG:-/var/tmp/xfskit-bench-n$N-d$DIRS.img}
SIZE=${SIZE:-4G}
RUNS=${RUNS:-3}
MNT=${MNT:-/var/tmp/xfskit-bench-bulkstat.mnt}
REBUILD=${REBUILD:-0}

[ "$(id -u)" = 0 ] || { echo "bench/bulkstat.sh: needs root (loop mount, drop_caches)" >&2; exit 1; }
cd "$(dirname "$0")/.."
cargo build --release -q -p xfskit-cli
XFSKIT=$PWD/target/release/xfskit
TOOLS=/var/tmp/xfskit-bench-tools
mkdir -p "$MNT" "$TOOLS"
gcc -O2 -o "$TOOLS/mkfiles" bench/mkfiles.c
gcc -O2 -o "$TOOLS/kbulkstat" bench/kbulkstat.c
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; true; }
trap cleanup EXIT

if [ "$REBUILD" = 1 ] || [ ! -e "$IMG.done" ] || [ ! -e "$IMG" ]; then
    echo "making $IMG: $N files in $DIRS directories..."
    rm -f "$IMG" "$IMG.done"
    truncate -s "$SIZE" "$IMG"
    mkfs.xfs -q -f "$IMG"
    mount -o loop "$IMG" "$MNT"
    "$TOOLS/mkfiles" "$MNT" "$N" "$DIRS"
    umount "$MNT"
    touch "$IMG.done"
fi
AGS=$(xfs_db -r -c 'sb 0' -c 'p agcount' "$IMG" | awk '{print $3}')

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
declare -a NAMES SECS COUNTS

# measure NAME cold|warm COUNT-COMMAND -- TIMED-COMMAND...
measure() {
    local name=$1 mode=$2 count=$3; shift 4
    local best="" t0 t1 s i
    for ((i = 0; i < RUNS; i++)); do
        if [ "$mode" = cold ]; then drop; else "$@" > /dev/null; fi
        t0=$(date +%s.%N)
        "$@" > /dev/null
        t1=$(date +%s.%N)
        s=$(echo "$t1 - $t0" | bc -l)
        if [ -z "$best" ] || [ "$(echo "$s < $best" | bc -l)" = 1 ]; then best=$s; fi
    done
    NAMES+=("$name ($mode)"); SECS+=("$best"); COUNTS+=("$count")
}

per_ag() { # command prefix: runs "$@ AG" for every AG at once
    local ag
    for ((ag = 0; ag < AGS; ag++)); do "$@" "$ag" & done
    wait
}
kernel_ioctl_per_ag() { per_ag "$TOOLS/kbulkstat" "$MNT"; }
xfs_io_per_ag() {
    local ag
    for ((ag = 0; ag < AGS; ag++)); do xfs_io -c "bulkstat -a $ag" "$MNT" & done
    wait
}

n_xfskit=$("$XFSKIT" bulkstat "$IMG" --json | wc -l)
for mode in cold warm; do
    measure "xfskit bulkstat --json" $mode "$n_xfskit" -- "$XFSKIT" bulkstat "$IMG" --json
    measure "xfskit bulkstat --json --threads 1" $mode "$n_xfskit" -- "$XFSKIT" bulkstat "$IMG" --json --threads 1
done
measure "xfskit bulkstat (table)" cold "$n_xfskit" -- "$XFSKIT" bulkstat "$IMG"

mount -o loop,ro "$IMG" "$MNT"
n_kernel=$("$TOOLS/kbulkstat" "$MNT")
n_find=$(find "$MNT" -printf '%i\n' | wc -l)
for mode in cold warm; do
    measure "kernel ioctl, 1 process" $mode "$n_kernel" -- "$TOOLS/kbulkstat" "$MNT"
    measure "kernel ioctl, $AGS processes (-a AG)" $mode "$n_kernel" -- kernel_ioctl_per_ag
done
measure "xfs_io -c bulkstat, 1 process" cold "$n_kernel" -- xfs_io -c bulkstat "$MNT"
measure "xfs_io -c 'bulkstat -a AG', $AGS processes" cold "$n_kernel" -- xfs_io_per_ag
measure "find -printf '%i %m %s'" cold "$n_find" -- find "$MNT" -printf '%i %m %s\n'
umount "$MNT"

echo
echo "$N files in $DIRS directories, $AGS AGs, $(nproc) CPUs; best of $RUNS runs;"
echo "cold = page cache dropped before the run; all output to /dev/null"
printf '%-46s %9s %8s %11s %10s\n' "method" "inodes" "seconds" "inodes/s" "xfskit is"
base=$(echo "${COUNTS[0]} / ${SECS[0]}" | bc -l)
for i in "${!NAMES[@]}"; do
    rate=$(echo "${COUNTS[$i]} / ${SECS[$i]}" | bc -l)
    printf '%-46s %9d %8.3f %11.0f %9.2fx\n' "${NAMES[$i]}" "${COUNTS[$i]}" "${SECS[$i]}" "$rate" \
        "$(echo "$base / $rate" | bc -l)"
done
echo "(\"xfskit is\": rate of the first row, xfskit cold with default threads, over this row's rate)"
