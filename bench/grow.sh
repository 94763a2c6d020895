#!/bin/bash
# Benchmark `xfskit grow` of a qcow2 GPT disk (2 GiB -> 20 GiB by default)
# against the usual way without xfskit.
#
# Usage: bench/grow.sh [FROM TO]          (default: 2046m 20G; FROM is the
#                                          filesystem size xfskit build makes)
# Env:   XFSKIT   path of the xfskit binary (default target/release/xfskit)
#        ROUNDS=N timed runs per tool, the median printed (default 3)
#        VIRT_RESIZE=0 skip virt-resize (use the fallback below)
# The other side: with virt-resize (libguestfs-tools) installed,
#   qemu-img create -f qcow2 NEW SIZE + virt-resize --expand /dev/sda1 OLD NEW;
# otherwise, or when its appliance does not boot within 3 minutes (needs root)
#   qemu-img resize + qemu-img convert to raw + sgdisk -e + sgdisk to grow the
#   partition + loop mount at its offset + xfs_growfs + umount,
# the same end state (a grown qcow2, or a raw disk the kernel mounted).
# Prints each median and the ratio (other / xfskit).
set -euo pipefail
cd "$(dirname "$0")/.."
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
FROM=${1:-2046m}; TO=${2:-20G}
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d /tmp/xfskit-grow-bench.XXXXXX)
MNT=$W/mnt; mkdir -p "$MNT" "$W/src"
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; rm -rf "$W"; }
trap cleanup EXIT
head -c 50000000 /dev/urandom > "$W/src/blob"; echo hello > "$W/src/hello"
"$XFSKIT" build "$W/src" "$W/base.qcow2" --gpt --format qcow2 --size "$FROM" -q -f

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
now() { date +%s.%N; }

xfskit_once() {
    cp "$W/base.qcow2" "$W/x.qcow2"; sync
    local t0; t0=$(now)
    "$XFSKIT" grow "$W/x.qcow2" "$TO" >/dev/null 2>&1
    echo "$(now) - $t0" | bc
}

# libguestfs must boot its appliance (within 3 minutes) to count as usable.
if [ "${VIRT_RESIZE:-1}" != 0 ] && command -v virt-resize >/dev/null && timeout 180 guestfish -a /dev/null run >/dev/null 2>&1; then
    OTHER="qemu-img create + virt-resize --expand"
    other_once() {
        rm -f "$W/o.qcow2"; sync
        local t0; t0=$(now)
        qemu-img create -q -f qcow2 "$W/o.qcow2" "$TO"
        virt-resize -q --expand /dev/sda1 "$W/base.qcow2" "$W/o.qcow2" >/dev/null 2>&1
        echo "$(now) - $t0" | bc
    }
else
    [ "$(id -u)" = 0 ] || { echo "virt-resize is missing and the fallback needs root"; exit 2; }
    OTHER="qemu-img resize + convert to raw + sgdisk + loop mount + xfs_growfs"
    other_once() {
        cp "$W/base.qcow2" "$W/o.qcow2"; rm -f "$W/o.raw"; sync
        local t0; t0=$(now)
        qemu-img resize -q "$W/o.qcow2" "$TO"
        qemu-img convert -O raw "$W/o.qcow2" "$W/o.raw"
        sgdisk -q -e "$W/o.raw"
        local start; start=$(sgdisk -i 1 "$W/o.raw" | awk '/First sector/ {print $3}')
        sgdisk -q -d 1 -n "1:$start:0" -t 1:8300 "$W/o.raw"
        local end; end=$(sgdisk -i 1 "$W/o.raw" | awk '/Last sector/ {print $3}')
        local lo; lo=$(losetup -f --show -o $((start * 512)) --sizelimit $(((end - start + 1) * 512)) "$W/o.raw")
        mount "$lo" "$MNT"; xfs_growfs "$MNT" >/dev/null; umount "$MNT"; losetup -d "$lo"
        echo "$(now) - $t0" | bc
    }
fi

X=(); O=()
for _ in $(seq "$ROUNDS"); do X+=("$(xfskit_once)"); O+=("$(other_once)"); done
mx=$(median "${X[@]}"); mo=$(median "${O[@]}")
echo "grow of a qcow2 GPT disk, $FROM filesystem -> $TO disk, median of $ROUNDS"
printf '  xfskit grow: %8.3f s   (%s)\n' "$mx" "${X[*]}"
printf '  %s: %8.3f s   (%s)\n' "$OTHER" "$mo" "${O[*]}"
printf '  ratio (other / xfskit): %.1fx\n' "$(echo "$mo / $mx" | bc -l)"
