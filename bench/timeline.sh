#!/bin/bash
# Timeline (body file) benchmark: `xfskit timeline` against `xfskit
# bulkstat --paths` (the same scan and paths, other output) and plain
# `xfskit bulkstat`, and against the kernel's way of making the same body
# file: loop mount, `find -printf` in body form, unmount. The Sleuth Kit's
# own `fls -r -m /` is not in the table: Debian's sleuthkit (4.11) reads no
# XFS ("Cannot determine file system type"; XFS came in 4.13 as
# experimental and left again in 4.14), which the script shows.
#
# Two images of N empty files in DIRS directories, filled by the kernel:
# one made by mkfs.xfs 7.2 (parent pointers: paths from the inodes), one by
# Debian's mkfs.xfs 6.1 (none: every directory is read and indexed first).
# Cold (page cache dropped before each run) and warm; median of RUNS runs,
# with peak RSS. Every output goes to /dev/null; the line counts are
# compared once, untimed.
#
# Usage (as root):  bench/timeline.sh          N=200000 DIRS=200 bench/timeline.sh
#   N, DIRS  files and directories (default 100000 and 100)
#   RUNS     runs of each measurement (default 3)
#   XFSKIT   the binary (default: a release build, made if missing)
set -euo pipefail

N=${N:-100000}
DIRS=${DIRS:-100}
RUNS=${RUNS:-3}
SIZE=${SIZE:-2G}
MNT=${MNT:-/var/tmp/xfskit-bench-timeline.mnt}

[ "$(id -u)" = 0 ] || { echo "bench/timeline.sh: needs root (loop mount, drop_caches)" >&2; exit 1; }
cd "$(dirname "$0")/.."
XFSKIT=${XFSKIT:-${CARGO_TARGET_DIR:-$PWD/target}/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
MKFS72=$PWD/../shared/xfsprogs-7.2/bin/mkfs.xfs
[ -x "$MKFS72" ] || { echo "bench/timeline.sh: needs $MKFS72" >&2; exit 1; }
TOOLS=/var/tmp/xfskit-bench-tools
mkdir -p "$MNT" "$TOOLS"
gcc -O2 -o "$TOOLS/mkfiles" bench/mkfiles.c
LOG=$(mktemp)
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; rm -f "$LOG"; true; }
trap cleanup EXIT

# make_image IMG MKFS: N files in DIRS directories, made by the kernel (kept).
make_image() {
    [ -e "$1.done" ] && [ -e "$1" ] && return
    echo "making $1: $N files in $DIRS directories..."
    rm -f "$1" "$1.done"
    truncate -s "$SIZE" "$1"
    "$2" -q -f "$1"
    mount -o loop "$1" "$MNT"
    "$TOOLS/mkfiles" "$MNT" "$N" "$DIRS"
    umount "$MNT"
    touch "$1.done"
}
IMG72=/var/tmp/xfskit-bench-timeline-72-n$N-d$DIRS.img
IMG61=/var/tmp/xfskit-bench-timeline-61-n$N-d$DIRS.img
make_image "$IMG72" "$MKFS72"
make_image "$IMG61" /usr/sbin/mkfs.xfs

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# run IMG MODE NAME CMD...: one timed run; appends "IMG NAME MODE seconds rss_kib".
run() {
    local img=$1 mode=$2 name=$3 s m; shift 3
    if [ "$mode" = cold ]; then drop; else "$@" > /dev/null 2>&1 || true; fi
    /usr/bin/time -f '%e %M' -o /tmp/xfskit-bench-timeline.time "$@" > /dev/null 2>&1 || {
        echo "bench/timeline.sh: '$*' failed" >&2; exit 1; }
    read -r s m < /tmp/xfskit-bench-timeline.time
    echo "$img $name $mode $s $m" >> "$LOG"
}
median() { # IMG NAME MODE
    awk -v i="$1" -v n="$2" -v m="$3" '$1 == i && $2 == n && $3 == m {print $4, $5}' "$LOG" |
        sort -n | awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'
}
# The kernel's body file: every path with its inode's fields, as find
# prints them (%M is ls's mode string; %A@ ... the times with fractions).
body_find() {
    mount -o loop,ro "$1" "$MNT"
    find "$MNT" -printf '0|%p|%i|%M|%U|%G|%s|%A@|%T@|%C@|%B@\n'
    umount "$MNT"
}

echo "fls -r -m / (Debian's sleuthkit $(dpkg-query -W -f '${Version}' sleuthkit 2>/dev/null || echo missing)):" \
    "$(fls -r -m / "$IMG72" 2>&1 | head -1)"
for img in 72 61; do
    f=IMG$img; f=${!f}
    ours=$("$XFSKIT" timeline "$f" | wc -l)
    theirs=$(body_find "$f" | wc -l)
    echo "mkfs.xfs ${img:0:1}.${img:1}: body lines: xfskit timeline $ours, mount + find $theirs"
    for mode in cold warm; do
        for ((i = 0; i < RUNS; i++)); do
            run $img $mode timeline "$XFSKIT" timeline "$f"
            run $img $mode paths "$XFSKIT" bulkstat --paths "$f"
            run $img $mode bulkstat "$XFSKIT" bulkstat "$f"
            run $img $mode find bash -c "$(declare -f body_find); MNT='$MNT' body_find '$f'"
        done
    done
done
printf '%-10s %-42s %6s %9s %10s %11s\n' "mkfs.xfs" "method" "cache" "seconds" "peak RSS" "timeline is"
for img in 72 61; do
    for mode in cold warm; do
        read -r ts tm < <(median $img timeline $mode)
        printf '%-10s %-42s %6s %9.2f %8d M %11s\n' "${img:0:1}.${img:1}" "xfskit timeline" $mode "$ts" $((tm / 1024)) ""
        for name in paths bulkstat find; do
            case $name in
                paths) label="xfskit bulkstat --paths" ;;
                bulkstat) label="xfskit bulkstat (no paths)" ;;
                find) label="mount + find -printf (body form) + umount" ;;
            esac
            read -r s m < <(median $img $name $mode)
            printf '%-10s %-42s %6s %9.2f %8d M %10.2fx\n' "${img:0:1}.${img:1}" "$label" $mode "$s" \
                $((m / 1024)) "$(echo "$s / $ts" | bc -l)"
        done
    done
done
echo "($N files in $DIRS directories, $(nproc) CPUs, median of $RUNS alternating runs;"
echo " \"timeline is\": the other's time over timeline's, above 1 when timeline is faster)"
