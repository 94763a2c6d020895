#!/bin/bash
# VM disk formats: `xfskit build --format F` writing the container
# directly, against what users do today: `xfskit build` to a raw image,
# then `qemu-img convert` to the format (a second full pass over the disk).
# Both end in the same format and options; each result is checked by
# `qemu-img check` where the format has one (not VHD) and converted back
# to raw by qemu-img, its partition equal to the raw build's.
#
# The source: a tree of N files (4-64 KiB of random bytes, directories of
# 500), built into a GPT disk. RUNS rounds alternate the two; medians.
#
#   N=20000 RUNS=3 FORMATS="vmdk vmdk-stream vhdx vhd vhd-fixed vdi qcow2" bench/vmdisk.sh
set -euo pipefail
N=${N:-20000}
RUNS=${RUNS:-3}
FORMATS=${FORMATS:-"vmdk vmdk-stream vhdx vhd vhd-fixed vdi qcow2"}
XFSKIT=${XFSKIT:-target/release/xfskit}
SCRATCH=${SCRATCH:-$(mktemp -d)}
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; e=$(date +%s.%N); echo "$e - $s" | bc; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

src=$SCRATCH/src
if [ ! -d "$src" ]; then
    mkdir -p "$src"
    python3 - "$src" "$N" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%d" % (i // 500))
    if i % 500 == 0:
        os.mkdir(d)
    with open(os.path.join(d, "f%d" % i), "wb") as f:
        f.write(os.urandom(4096 + (i * 7919) % 61440))
PY
fi
echo "source: $N files, $(du -sh "$src" | cut -f1)"

# qemu-img's name and options for each of our formats.
qemu_args() {
    case $1 in
        vmdk) echo "-O vmdk -o subformat=monolithicSparse" ;;
        vmdk-stream) echo "-O vmdk -o subformat=streamOptimized" ;;
        vhdx) echo "-O vhdx -o subformat=dynamic" ;;
        vhd) echo "-O vpc -o subformat=dynamic" ;;
        vhd-fixed) echo "-O vpc -o subformat=fixed,force_size=on" ;;
        vdi) echo "-O vdi" ;;
        qcow2) echo "-O qcow2" ;;
    esac
}

printf '%-12s %10s %14s %7s  %s\n' format "xfskit (s)" "raw+convert" ratio check
for f in $FORMATS; do
    rm -f "$SCRATCH/direct.times" "$SCRATCH/conv.times"
    for _ in $(seq "$RUNS"); do
        rm -f "$SCRATCH/d.$f"
        t "$XFSKIT" build --reproducible --gpt --format "$f" "$src" "$SCRATCH/d.$f" >> "$SCRATCH/direct.times"
        rm -f "$SCRATCH/r.img" "$SCRATCH/c.$f"
        # shellcheck disable=SC2046
        t bash -c "'$XFSKIT' build --reproducible --gpt '$src' '$SCRATCH/r.img' && qemu-img convert $(qemu_args "$f") '$SCRATCH/r.img' '$SCRATCH/c.$f'" >> "$SCRATCH/conv.times"
    done
    d=$(median < "$SCRATCH/direct.times")
    c=$(median < "$SCRATCH/conv.times")
    # The same disk as the raw build: the partition compared byte for
    # byte after qemu-img converts it back (a dynamic VHD's disk is
    # rounded up to whole CHS geometry, so its GPT backup lies elsewhere).
    verdict=same
    qfmt=$(qemu_args "$f" | awk '{print $2}')
    part=$(( $(stat -c %s "$SCRATCH/r.img") - 2 * 1048576 ))
    rm -f "$SCRATCH/back.raw"
    qemu-img convert -f "$qfmt" -O raw "$SCRATCH/d.$f" "$SCRATCH/back.raw"
    cmp -s -i 1048576:1048576 -n "$part" "$SCRATCH/r.img" "$SCRATCH/back.raw" || verdict="DIFFERS from raw"
    rm -f "$SCRATCH/back.raw"
    case $f in vhd|vhd-fixed) ;; *) qemu-img check -q -f "$qfmt" "$SCRATCH/d.$f" >/dev/null 2>&1 || verdict="$verdict, check NOT CLEAN" ;; esac
    printf '%-12s %10.3f %14.3f %6.2fx  %s\n' "$f" "$d" "$c" "$(echo "$c / $d" | bc -l)" "$verdict"
    rm -f "$SCRATCH/d.$f" "$SCRATCH/c.$f"
done
