#!/bin/bash
# Repair benchmark: `xfskit repair` against `xfs_repair` (xfsprogs 7.2) on
# copies of the same damaged image: N empty files in DIRS directories made
# by the kernel on mkfs.xfs 7.2's defaults (parent pointers), then damaged
# with xfs_db 7.2: one directory's first data block (its magic), one
# file's inode magic, one file's link count. Each tool repairs its own copy
# (page cache warm: the copy was just written); the table gives seconds and
# peak RSS, then checks both results with xfs_repair -n and says where each
# left the files of the damaged directory (back in it, or in lost+found).
#
# DAMAGE=btrees damages the AG btrees instead: in every AG the free space
# btrees' and the rmapbt's roots, the refcount btree's and the finobt's
# (both tools rebuild them; the files all stay).
#
# Usage (as root):  bench/repair.sh        N=200000 DIRS=200 bench/repair.sh
#   N, DIRS   files and directories (default 1000000 and 1000)
#   DAMAGE    dir (default: the directory, inode and link count above) or btrees
#   IMG       the undamaged image (default /var/tmp/xfskit-bench-repair-nN-dDIRS.img,
#             kept for reruns; REBUILD=1 makes it again); SIZE (default 4G)
#   RUNS      runs of each tool, the median is shown (default 3)
#   XFSKIT    the xfskit binary (default: target/release/xfskit, built)
set -euo pipefail

N=${N:-1000000}
DIRS=${DIRS:-1000}
IMG=${IMG:-/var/tmp/xfskit-bench-repair-n$N-d$DIRS.img}
SIZE=${SIZE:-4G}
RUNS=${RUNS:-3}
DAMAGE=${DAMAGE:-dir}
REBUILD=${REBUILD:-0}
MNT=/var/tmp/xfskit-bench-repair.mnt

[ "$(id -u)" = 0 ] || { echo "bench/repair.sh: needs root (loop mount)" >&2; exit 1; }
cd "$(dirname "$0")/.."
B=$(cd ../shared/xfsprogs-7.2/bin && pwd)
if [ -z "${XFSKIT:-}" ]; then
    cargo build --release -q -p xfskit-cli
    XFSKIT=$PWD/target/release/xfskit
fi
TOOLS=/var/tmp/xfskit-bench-tools
mkdir -p "$MNT" "$TOOLS"
gcc -O2 -o "$TOOLS/mkfiles" bench/mkfiles.c
WORK=$(mktemp -d /var/tmp/xfskit-bench-repair.XXXXXX)
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; rm -rf "$WORK"; true; }
trap cleanup EXIT

if [ "$REBUILD" = 1 ] || [ ! -e "$IMG.done" ] || [ ! -e "$IMG" ]; then
    echo "making $IMG: $N files in $DIRS directories..."
    rm -f "$IMG" "$IMG.done"
    truncate -s "$SIZE" "$IMG"
    "$B/mkfs.xfs" -q -f "$IMG"
    mount -o loop "$IMG" "$MNT"
    "$TOOLS/mkfiles" "$MNT" "$N" "$DIRS"
    umount "$MNT"
    touch "$IMG.done"
fi

# The damage, from the image's own numbers.
dir=$("$XFSKIT" ls "$IMG" / | head -1)
ino() { "$XFSKIT" stat "$IMG" "$1" | awk '/ino:/{print $2}'; }
d=$(ino "/$dir")
files=$("$XFSKIT" ls "$IMG" "/$dir" | wc -l)
other=$("$XFSKIT" ls "$IMG" / | sed -n 2p)
f1=$(ino "/$other/$("$XFSKIT" ls "$IMG" "/$other" | head -1)")
f2=$(ino "/$other/$("$XFSKIT" ls "$IMG" "/$other" | sed -n 2p)")
field=$("$B/xfs_db" -r -c "inode $d" -c "dblock 0" -c print "$IMG" | awk -F' = ' '/hdr.magic/ && !f {print $1; f = 1}')
agcount=$("$B/xfs_db" -r -c "sb 0" -c "print agcount" "$IMG" | awk '{print $3}')
btree_cmds=()
for ((a = 0; a < agcount; a++)); do
    btree_cmds+=(-c "agf $a" -c "write -d bnoroot 0" -c "write -d rmaproot 0" -c "write -d refcntroot 0" \
        -c "agi $a" -c "write -d free_root 0")
done
damage() {
    cp --sparse=always "$IMG" "$1"
    if [ "$DAMAGE" = btrees ]; then
        "$B/xfs_db" -x "${btree_cmds[@]}" "$1" > /dev/null 2>&1
        return
    fi
    "$B/xfs_db" -x -c "inode $d" -c "dblock 0" -c "fuzz -d $field zeroes" \
        -c "inode $f1" -c "write -d core.magic 0" -c "inode $f2" -c "write core.nlinkv2 9" "$1" > /dev/null 2>&1
}

LOG=$WORK/log
run() { # NAME CMD...: damages a copy, times CMD on it
    local name=$1 s m; shift
    damage "$WORK/$name.img"
    /usr/bin/time -f '%e %M' -o "$WORK/time" "$@" "$WORK/$name.img" > "$WORK/$name.out" 2>&1 || true
    read -r s m < "$WORK/time"
    echo "$name $s $m" >> "$LOG"
}
median() {
    awk -v n="$1" '$1 == n {print $2, $3}' "$LOG" | sort -n |
        awk '{s[NR] = $1; r[NR] = $2} END {k = int((NR + 1) / 2); print s[k], r[k]}'
}
for ((i = 0; i < RUNS; i++)); do
    run xfskit "$XFSKIT" repair
    run xfs_repair "$B/xfs_repair"
done
read -r ks km < <(median xfskit)
read -r rs rm < <(median xfs_repair)
printf '%-14s %9s %10s %9s\n' "tool" "seconds" "peak RSS" "xfskit is"
printf '%-14s %9.2f %8d M %9s\n' "xfskit repair" "$ks" $((km / 1024)) ""
printf '%-14s %9.2f %8d M %8.2fx\n' "xfs_repair" "$rs" $((rm / 1024)) "$(echo "$rs / $ks" | bc -l)"
for t in xfskit xfs_repair; do
    img=$WORK/$t.img
    if "$B/xfs_repair" -n "$img" > /dev/null 2>&1; then clean=clean; else clean="NOT clean"; fi
    back=$({ "$XFSKIT" ls "$img" "/$dir" 2>/dev/null || true; } | wc -l)
    lost=$({ "$XFSKIT" ls "$img" /lost+found 2>/dev/null || true; } | wc -l)
    echo "$t: xfs_repair -n $clean after; /$dir holds $back of its $files files, lost+found $lost entries"
done
echo "($N files in $DIRS directories, damage: $DAMAGE, $(nproc) CPUs, median of $RUNS runs; \"xfskit is\": times faster)"
