#!/bin/bash
# Recovery benchmark: `xfskit recover` against the kernel's replay at mount,
# on copies of one dirty image with a 64 MiB log (a 1 GiB filesystem, the
# default log size). Two ways to dirty it:
#   SOURCE=kernel (default): a loop mount, FILES creates in DIRS directories
#     with no sync, then `xfs_io -x -c 'shutdown -f'`. The kernel's log
#     pushing keeps its live log near 20 MiB.
#   SOURCE=full: xfskit's own journal (examples/full_log.rs) runs metadata
#     work until its live log reaches three quarters of the log (48 MiB), and
#     stops at the writeback that would start then: the fullest log a writer
#     leaves, which the kernel must replay too.
# Cold cache: the page cache is dropped before each timed run. The kernel
# time is that of `mount` (recovery happens inside it); its unmount is not
# counted. Each xfskit result is checked with xfs_repair -n.
#
# Usage (as root):  bench/recover.sh      SOURCE=full RUNS=3 bench/recover.sh
#   XFSKIT  the xfskit binary (default: built with --release)
set -euo pipefail

FILES=${FILES:-60000}
DIRS=${DIRS:-60}
RUNS=${RUNS:-3}
DIR=${DIR:-/var/tmp/xfskit-bench-recover}

[ "$(id -u)" = 0 ] || { echo "bench/recover.sh: needs root (loop mounts)" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ -z "${XFSKIT:-}" ]; then
    cargo build --release -q -p xfskit-cli
    XFSKIT=$PWD/target/release/xfskit
fi
mkdir -p "$DIR/mnt"
IMG=$DIR/dirty.img
rm -f "$IMG"
truncate -s 1G "$IMG"
mkfs.xfs -q -f "$IMG"
if [ "${SOURCE:-kernel}" = full ]; then
    cargo build --release -q -p xfskit --example full_log
    target/release/examples/full_log "$IMG"
else
    mount -o loop "$IMG" "$DIR/mnt"
    for d in $(seq 1 "$DIRS"); do
        mkdir "$DIR/mnt/d$d"
        (cd "$DIR/mnt/d$d" && seq 1 $((FILES / DIRS)) | xargs touch)
    done
    xfs_io -x -c 'shutdown -f' "$DIR/mnt"
    umount "$DIR/mnt"
fi
"$XFSKIT" log "$IMG" | sed -n '2,4p'

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
K=$(mktemp); X=$(mktemp)
trap 'rm -f "$K" "$X"; umount "$DIR/mnt" 2>/dev/null || true' EXIT
for _ in $(seq 1 "$RUNS"); do
    cp --sparse=always "$IMG" "$DIR/k.img"
    cp --sparse=always "$IMG" "$DIR/x.img"
    drop
    s=$(date +%s.%N); mount -o loop "$DIR/k.img" "$DIR/mnt"; e=$(date +%s.%N)
    echo "$e - $s" | bc >> "$K"
    umount "$DIR/mnt"
    drop
    s=$(date +%s.%N); "$XFSKIT" recover "$DIR/x.img" > /dev/null; e=$(date +%s.%N)
    echo "$e - $s" | bc >> "$X"
    xfs_repair -n "$DIR/x.img" > /dev/null 2>&1 || { echo "xfs_repair -n found problems" >&2; exit 1; }
done
k=$(median < "$K"); x=$(median < "$X")
printf 'kernel mount (replay): %s s\nxfskit recover:        %s s\nratio (kernel / xfskit): %s\n' \
    "$k" "$x" "$(echo "scale=2; $k / $x" | bc)"
rm -f "$DIR/k.img" "$DIR/x.img"
