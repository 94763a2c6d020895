#!/bin/bash
# Benchmark `xfskit mkfs` against mkfs.xfs on sparse image files.
#
# Usage: bench/mkfs.sh [SIZE...]        (default: 1t 1p 16p 64p 256p)
# Env:   XFSKIT      path of the xfskit binary (default target/release/xfskit)
#        SCRATCH     directory on an XFS filesystem for the images; if unset and
#                    we are root, a sparse 150 GiB XFS image under target/ is
#                    loop-mounted for the run (ext4 cannot hold files > 16 TiB).
#        STRACE=0    skip the syscall-counting runs.
#        ROUNDS=N    timed runs per tool and size, alternating mkfs.xfs and
#                    xfskit; the median is printed (default 3).
# For each size: median wall time (no tracing), write syscalls and bytes written
# (one strace run: write, pwrite64, pwritev, pwritev2, io_uring_enter), and
# space used by the image (du).  Also checks that `-N` at 8 EiB prints the
# same summary as mkfs.xfs.
set -euo pipefail
cd "$(dirname "$0")/.."
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
SIZES=("$@"); [ ${#SIZES[@]} -gt 0 ] || SIZES=(1t 1p 16p 64p 256p)
UUID=11111111-2222-3333-4444-555555555555
MNT=""
cleanup() { [ -n "$MNT" ] && umount "$MNT" 2>/dev/null; true; }
trap cleanup EXIT
if [ -z "${SCRATCH:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "set SCRATCH to a directory on XFS (or run as root)"; exit 2; }
    mkdir -p target/bench-scratch/mnt
    IMG=target/bench-scratch/scratch.img
    [ -f $IMG ] || { truncate -s 150G $IMG; mkfs.xfs -q $IMG; }
    MNT=$PWD/target/bench-scratch/mnt
    mountpoint -q "$MNT" || mount -o loop $IMG "$MNT"
    SCRATCH=$MNT
fi
[ "$(stat -f -c %T "$SCRATCH")" = xfs ] || echo "warning: $SCRATCH is not XFS"
command -v strace >/dev/null || { echo "strace missing (apt-get install strace)"; STRACE=0; }

ROUNDS=${ROUNDS:-3}
cmd_for() {
    if [ "$1" = mkfs.xfs ]; then CMD=(mkfs.xfs -q -f -m uuid=$UUID "$2");
    else CMD=("$XFSKIT" mkfs -q -f -m uuid=$UUID "$2"); fi
}

# timed TOOL IMG SIZE -> prints the wall time of one untraced run
timed() {
    cmd_for "$1" "$2"
    rm -f "$2"; truncate -s "${3^^}" "$2"; sync
    local t0 t1; t0=$(date +%s.%N); "${CMD[@]}" >/dev/null; t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
    rm -f "$2"
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# run TOOL IMG SIZE -> sets W (write calls), B (bytes), D (du bytes)
run() {
    local tool=$1 img=$2 size=$3
    cmd_for "$tool" "$img"; local cmd=("${CMD[@]}")
    rm -f "$img"; truncate -s "${size^^}" "$img"; sync
    "${cmd[@]}" >/dev/null
    D=$(du -B1 "$img" | cut -f1)
    W=-; B=-
    if [ "${STRACE:-1}" != 0 ]; then
        rm -f "$img"; truncate -s "${size^^}" "$img"
        strace -f -qq -o "$SCRATCH/trace.txt" -e trace=write,pwrite64,pwritev,pwritev2,io_uring_enter "${cmd[@]}" >/dev/null
        W=$(grep -c -E '(write|pwrite64|pwritev2?|io_uring_enter)\(' "$SCRATCH/trace.txt" || true)
        # Calls of other threads interleave: the result is then on a "resumed" line.
        B=$(grep -E '(write|pwrite64|pwritev2?)(\(| resumed>)' "$SCRATCH/trace.txt" | sed -n 's/.*= \([0-9]\+\)$/\1/p' | awk '{s+=$1} END {printf "%d\n", s}')
        rm -f "$SCRATCH/trace.txt"
    fi
    rm -f "$img"
}

ratio() { if [ "$2" = - ] || [ "$1" = - ] || [ "$(echo "$2 == 0" | bc)" = 1 ]; then echo -; else echo "scale=3; $1 / $2" | bc; fi; }
hum() { [ "$1" = - ] && { echo -; return; }; numfmt --to=iec "$1"; }

printf "%-6s | %10s %10s %7s | %9s %9s %7s | %9s %9s %7s | %9s %9s %7s\n" size "mkfs.xfs s" "xfskit s" ratio \
    "xfs calls" "kit calls" ratio "xfs bytes" "kit bytes" ratio "xfs du" "kit du" ratio
for s in "${SIZES[@]}"; do
    rTs=(); oTs=()
    for ((i = 0; i < ROUNDS; i++)); do
        rTs+=("$(timed mkfs.xfs "$SCRATCH/ref.img" "$s")")
        oTs+=("$(timed xfskit "$SCRATCH/ours.img" "$s")")
    done
    rT=$(median "${rTs[@]}"); oT=$(median "${oTs[@]}")
    run mkfs.xfs "$SCRATCH/ref.img" "$s"; rW=$W rB=$B rD=$D
    run xfskit "$SCRATCH/ours.img" "$s"; oW=$W oB=$B oD=$D
    printf "%-6s | %10.2f %10.2f %7s | %9s %9s %7s | %9s %9s %7s | %9s %9s %7s\n" "$s" "$rT" "$oT" "$(ratio $oT $rT)" \
        "$rW" "$oW" "$(ratio $oW $rW)" "$(hum $rB)" "$(hum $oB)" "$(ratio $oB $rB)" "$(hum $rD)" "$(hum $oD)" "$(ratio $oD $rD)"
done

# -N at 8 EiB: the summaries must be identical.
rm -f "$SCRATCH/n.img"; touch "$SCRATCH/n.img"
for sz in 8191p 8e; do
    a=$(mkfs.xfs -N -f -d size=$sz "$SCRATCH/n.img" 2>&1 | head -12 || true)
    b=$("$XFSKIT" mkfs -N -f -d size=$sz "$SCRATCH/n.img" 2>&1 | sed 's/^xfskit mkfs: //' || true)
    # mkfs.xfs follows an option error with its usage text; compare the first line then.
    echo "$a" | grep -q '^meta-data' || a=$(echo "$a" | head -1)
    if [ "$a" = "$b" ]; then echo "-N -d size=$sz: identical to mkfs.xfs: $(echo "$a" | head -1 | tr -s ' ')";
    else echo "-N -d size=$sz differs:"; diff <(echo "$a") <(echo "$b") || true; fi
done
rm -f "$SCRATCH/n.img"
