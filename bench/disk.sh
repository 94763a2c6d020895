#!/bin/bash
# Disk image benchmark on a qcow2 GPT disk holding XFS, side by side in one
# run. One file read out:
#   xfskit cat DISK.qcow2 FILE          (finds the XFS partition itself)
#   virt-cat -a DISK.qcow2 -m /dev/sda1 FILE   (libguestfs: boots an appliance)
#   qemu-img convert to raw, then xfskit cat   (what users do today)
# The whole tree copied out, and one file and a tree (DIR, default SRC's
# largest subdirectory) copied in (each into a fresh copy of the disk):
#   xfskit cp -r DISK.qcow2:/ OUT, xfskit cp FILE DISK.qcow2:/copy-in,
#   xfskit cp -r DIR DISK.qcow2:/copy-in
#   guestfish copy-out, upload, copy-in (libguestfs; virt-copy-out and
#   virt-copy-in need an OS on the disk to inspect, this one has none)
#   as root: qemu-img convert to raw, loop mount the partition, cp, umount
#     (and qemu-img convert back to qcow2 after a copy in): what root users
#     do where qemu-nbd has no nbd module, as here
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
"$XFSKIT" build -q "$SRC" "$FS" --size auto --slack 50%+64m > /dev/null
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

# timed_run NAME CMD...: one run, seconds into $LOG
timed_run() {
    local name=$1 t0 t1; shift
    t0=$(date +%s.%N)
    "$@" > /dev/null 2> "$WORK/err" || { echo "bench/disk.sh: $name failed:"; cat "$WORK/err"; exit 1; } >&2
    t1=$(date +%s.%N)
    echo "$name $(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" >> "$LOG"
}
DIR=${DIR:-$(cd "$SRC" && du -s -- */ 2>/dev/null | sort -n | tail -1 | cut -f2 | sed 's:/$::')}
UP=$SRC/$FILE
fresh() { rm -rf "$WORK/w.qcow2" "$WORK/out-copy"; cp --sparse=always "$QCOW" "$WORK/w.qcow2"; }
root_mount() {  # qcow2 -> raw, loop device over partition 1, mount at $WORK/mnt
    qemu-img convert -O raw "$WORK/w.qcow2" "$WORK/conv.raw"
    mkdir -p "$WORK/mnt"
    LOOP=$(losetup -f --show -o 1048576 --sizelimit "$(( $(partx -g -b -o SIZE -n 1 "$WORK/conv.raw") ))" "$WORK/conv.raw")
    mount "$LOOP" "$WORK/mnt"
}
root_umount() { umount "$WORK/mnt"; losetup -d "$LOOP"; }
root_copy_out() { root_mount && cp -a "$WORK/mnt" "$WORK/out-copy" && root_umount && rm -f "$WORK/conv.raw"; }
root_copy_in() {  # $1: what to copy into the root directory
    root_mount && cp -a "$1" "$WORK/mnt/copy-in" && root_umount &&
        qemu-img convert -O qcow2 "$WORK/conv.raw" "$WORK/w.qcow2" && rm -f "$WORK/conv.raw"
}
guest_upload() { guestfish --rw -a "$WORK/w.qcow2" -m /dev/sda1 upload "$UP" /copy-in; }
am_root=$([ "$(id -u)" = 0 ] && command -v partx > /dev/null && echo 1 || true)
for _ in $(seq "$RUNS"); do
    fresh; timed_run xfskit-out "$XFSKIT" cp -r -q "$WORK/w.qcow2:/" "$WORK/out-copy"
    fresh; timed_run xfskit-up "$XFSKIT" cp -q "$UP" "$WORK/w.qcow2:/copy-in"
    fresh; timed_run xfskit-in "$XFSKIT" cp -r -q "$SRC/$DIR" "$WORK/w.qcow2:/copy-in"
    if [ -n "$am_root" ]; then
        fresh; timed_run root-out root_copy_out
        fresh; timed_run root-up root_copy_in "$UP"
        fresh; timed_run root-in root_copy_in "$SRC/$DIR"
    fi
done
# The results are right: the tree out equals SRC, the copies in read back.
fresh; "$XFSKIT" cp -r -q "$WORK/w.qcow2:/" "$WORK/out-copy"
diff -r --no-dereference "$SRC" "$WORK/out-copy" > /dev/null || { echo "bench/disk.sh: xfskit cp -r out differs from $SRC" >&2; exit 1; }
"$XFSKIT" cp -q "$UP" "$WORK/w.qcow2:/up.copy" && "$XFSKIT" cp -r -q "$SRC/$DIR" "$WORK/w.qcow2:/dir.copy"
"$XFSKIT" cat "$WORK/w.qcow2" /up.copy | cmp -s - "$UP" || { echo "bench/disk.sh: the file copied in reads back other bytes" >&2; exit 1; }
rm -rf "$WORK/out-copy"; "$XFSKIT" cp -r -q "$WORK/w.qcow2:/dir.copy" "$WORK/out-copy"
diff -r --no-dereference "$SRC/$DIR" "$WORK/out-copy" > /dev/null || { echo "bench/disk.sh: the tree copied in reads back differently" >&2; exit 1; }
qemu-img check -q "$WORK/w.qcow2" || { echo "bench/disk.sh: qemu-img check failed after the copies in" >&2; exit 1; }
if command -v guestfish > /dev/null; then
    export LIBGUESTFS_BACKEND=direct
    for _ in $(seq "$VRUNS"); do
        fresh; mkdir -p "$WORK/out-copy"
        timed_run virt-out guestfish --ro -a "$WORK/w.qcow2" -m /dev/sda1 copy-out / "$WORK/out-copy"
        fresh; timed_run virt-up guest_upload
        fresh; timed_run virt-in guestfish --rw -a "$WORK/w.qcow2" -m /dev/sda1 mkdir /copy-in : copy-in "$SRC/$DIR" /copy-in
    done
fi
rm -rf "$WORK/w.qcow2" "$WORK/out-copy" "$WORK/conv.raw" "$WORK/mnt"

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
# row LABEL NAME BASE: the median of NAME and its ratio to BASE's
row() {
    local m b; m=$(median "$2"); b=$(median "$3")
    [ -n "$m" ] || return 0
    printf '%-44s %10.4f %9.0fx\n' "$1" "$m" "$(awk -v a="$m" -v b="$b" 'BEGIN {print a / b}')"
}
echo
printf '%-44s %10s %10s\n' "copy out: the whole tree ($(du -sh "$SRC" | cut -f1))" seconds "vs xfskit"
row "xfskit cp -r disk.qcow2:/ OUT" xfskit-out xfskit-out
row "root: convert, loop mount, cp -a, umount" root-out xfskit-out
row "guestfish copy-out / OUT $virt" virt-out xfskit-out
echo
printf '%-44s %10s %10s\n' "copy in: /$FILE" seconds "vs xfskit"
row "xfskit cp FILE disk.qcow2:/copy-in" xfskit-up xfskit-up
row "root: convert, mount, cp, umount, convert" root-up xfskit-up
row "guestfish upload $virt" virt-up xfskit-up
echo
printf '%-44s %10s %10s\n' "copy in: $DIR ($(du -sh "$SRC/$DIR" | cut -f1), $(find "$SRC/$DIR" | wc -l) entries)" seconds "vs xfskit"
row "xfskit cp -r DIR disk.qcow2:/copy-in" xfskit-in xfskit-in
row "root: convert, mount, cp -a, umount, convert" root-in xfskit-in
row "guestfish mkdir, copy-in DIR $virt" virt-in xfskit-in
