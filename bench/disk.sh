#!/bin/bash
# Disk image benchmark: one file read out of a qcow2 GPT disk holding XFS,
# side by side in one run:
#   xfskit cat DISK.qcow2 FILE          (finds the XFS partition itself)
#   virt-cat -a DISK.qcow2 -m /dev/sda1 FILE   (libguestfs: boots an appliance)
#   qemu-img convert to raw, then xfskit cat   (what users do today)
# The disk is made without root: `xfskit build` of SRC into an image, put
# into partition 1 of a GPT disk made by sgdisk, converted by qemu-img.
# Caches are warm for every tool (the image was just written); medians of
# RUNS runs (VRUNS for virt-cat, which takes seconds).
#
# Usage:  bench/disk.sh      SRC=/usr/share/doc RUNS=5 VRUNS=3 bench/disk.sh
#   FILE  the file to read, relative to SRC (default: the largest of the
#         first 500 regular files found)
#   XFSKIT  an xfskit binary (default: cargo build --release)
# Needs: sgdisk (gdisk), qemu-img (qemu-utils); virt-cat (libguestfs-tools
# and a kernel in /boot) is measured when present. Where KVM is refused the
# appliance runs under TCG (LIBGUESTFS_BACKEND_SETTINGS=force_tcg), as here.
set -euo pipefail

SRC=${SRC:-/usr/share/doc}
RUNS=${RUNS:-5}
VRUNS=${VRUNS:-3}
WORK=${WORK:-/var/tmp/xfskit-bench-disk}
cd "$(dirname "$0")/.."
for t in sgdisk qemu-img; do
    command -v $t >/dev/null || { echo "bench/disk.sh: $t is not installed" >&2; exit 1; }
done
if [ -z "${XFSKIT:-}" ]; then
    cargo build --release -q -p xfskit-cli
    XFSKIT=$PWD/target/release/xfskit
fi
if [ -z "${FILE:-}" ]; then
    FILE=$(cd "$SRC" && find . -type f -printf '%s %P\n' 2>/dev/null | awk 'NR <= 500' | sort -n | tail -1 | cut -d' ' -f2-)
fi
mkdir -p "$WORK"
FS=$WORK/fs.img RAW=$WORK/disk.raw QCOW=$WORK/disk.qcow2

echo "making the disk: xfskit build $SRC, GPT by sgdisk, qcow2 by qemu-img"
rm -f "$FS" "$RAW" "$QCOW"
"$XFSKIT" build -q "$SRC" "$FS" --size auto > /dev/null
fs_bytes=$(stat -c %s "$FS")
truncate -s $((fs_bytes + 2 * 1048576)) "$RAW"
sgdisk -n1:2048:+$((fs_bytes / 512)) -t1:8300 "$RAW" > /dev/null
dd if="$FS" of="$RAW" bs=1M oflag=seek_bytes seek=1048576 conv=notrunc,sparse status=none
qemu-img convert -O qcow2 "$RAW" "$QCOW"
rm -f "$FS" "$RAW"
echo "disk: $(du -h --apparent-size "$QCOW" | cut -f1) qcow2; file: /$FILE ($(stat -c %s "$SRC/$FILE") bytes)"

LOG=$(mktemp)
trap 'rm -f "$LOG" "$WORK/out" "$WORK/conv.raw"' EXIT
# timed NAME CMD...: one run, its output into $WORK/out, seconds into $LOG
timed() {
    local name=$1 t0 t1; shift
    t0=$(date +%s.%N)
    "$@" > "$WORK/out" 2> "$WORK/err" || { echo "bench/disk.sh: $name failed:"; cat "$WORK/err"; exit 1; } >&2
    t1=$(date +%s.%N)
    cmp -s "$WORK/out" "$SRC/$FILE" || { echo "bench/disk.sh: $name printed other bytes" >&2; exit 1; }
    echo "$name $(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" >> "$LOG"
}
median() {
    awk -v n="$1" '$1 == n {print $2}' "$LOG" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
convert_then_cat() {
    qemu-img convert -O raw "$QCOW" "$WORK/conv.raw" && "$XFSKIT" cat "$WORK/conv.raw" "/$FILE"
}

"$XFSKIT" cat "$QCOW" "/$FILE" > /dev/null    # warm up
for _ in $(seq "$RUNS"); do
    timed xfskit "$XFSKIT" cat "$QCOW" "/$FILE"
    timed convert convert_then_cat
    rm -f "$WORK/conv.raw"
done
virt=""
if command -v virt-cat > /dev/null; then
    export LIBGUESTFS_BACKEND=direct
    if ! virt-cat -a "$QCOW" -m /dev/sda1 "/$FILE" > /dev/null 2>&1; then
        export LIBGUESTFS_BACKEND_SETTINGS=force_tcg
        virt="(TCG: KVM refused)"
    fi
    for _ in $(seq "$VRUNS"); do
        timed virt-cat virt-cat -a "$QCOW" -m /dev/sda1 "/$FILE"
    done
fi

x=$(median xfskit)
c=$(median convert)
printf '%-34s %10s %10s\n' "read /$FILE" seconds "vs xfskit"
printf '%-34s %10.4f %10s\n' "xfskit cat (qcow2 GPT disk)" "$x" 1x
printf '%-34s %10.4f %9.0fx\n' "qemu-img convert + xfskit cat" "$c" "$(awk -v a="$c" -v b="$x" 'BEGIN {print a / b}')"
if [ -n "$(median virt-cat)" ]; then
    v=$(median virt-cat)
    printf '%-34s %10.4f %9.0fx\n' "virt-cat $virt" "$v" "$(awk -v a="$v" -v b="$x" 'BEGIN {print a / b}')"
else
    echo "virt-cat: not installed (libguestfs-tools)"
fi
