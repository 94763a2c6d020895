#!/bin/bash
# Side by side, in one run: the same workloads on a read-write `xfskit mount`,
# on the kernel's XFS (loop device) and on fuse2fs with ext4, each on a fresh
# image file of the same size, and the ratios. Every time includes the
# unmount, so each image is on disk and clean when the clock stops.
#
#   (a) FILES files of 4 KiB in 100 directories (the fs_mark workload)
#   (b) untar of a tar of SRC
#   (c) 1 GiB written sequentially in 1 MiB writes, then fsync (timed to
#       the fsync's return; the unmount is not timed)
#   (d) 4 KiB writes at random 4 KiB offsets of a 256 MiB file for RANDSECS
#       seconds, then fsync (operations per second)
#   (e) `find -ls` and `du -s` over the tree of (b), remounted, cold cache
#   (f) 4 writers at once, each FILES/4 files of 4 KiB in its own directory
#
# For (a) on XFS it also prints the log bytes per created file: how far the
# log head moved from the new image to the unmounted one (both read with
# `xfskit log --json`), the same count for xfskit and the kernel.
#
# Usage: bench/mount.sh            (as root; needs xfsprogs, e2fsprogs, fuse2fs)
# Env:   FILES (default 20000), SRC (default /usr/share), SIZE (default 4G),
#        THREADS (xfskit serving threads, default 2), XFSKIT (binary,
#        default target/release/xfskit, built if missing), XFSKIT_ARGS (more
#        `xfskit mount` arguments), RANDSECS (default 30), TARGETS (default
#        "xfskit xfskit-uring xfskit-wb kernel fuse2fs": xfskit takes requests
#        from /dev/fuse, xfskit-uring through io_uring (Linux 6.14+; the
#        fuse module's enable_uring is turned on for the run), xfskit-wb
#        from /dev/fuse with the writeback cache; not run by default:
#        xfskit-uring-inplace, io_uring with every WRITE done before it is
#        answered (--write-behind off), and xfskit-uring-wb, io_uring with
#        the writeback cache), FEATURES (6.1, the default: Debian's mkfs.xfs
#        makes every XFS image; 6.18: mkfs.xfs 6.15 beside the project with
#        the xfsprogs 6.18 defaults, parent pointers and exchange-range)
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-20000}
SRC=${SRC:-/usr/share}
SIZE=${SIZE:-4G}
THREADS=${THREADS:-2}
RANDSECS=${RANDSECS:-30}
TARGETS=${TARGETS:-xfskit xfskit-uring xfskit-wb kernel fuse2fs}
XFSKIT_ARGS=${XFSKIT_ARGS:-}
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
FEATURES=${FEATURES:-6.1}
MKFS_XFS=(mkfs.xfs)
if [ "$FEATURES" = 6.18 ]; then
    X615=$PWD/../shared/xfsprogs-6.15
    [ -x "$X615/libexec/mkfs.xfs" ] || { echo "bench/mount.sh: FEATURES=6.18 needs $X615" >&2; exit 2; }
    MKFS_XFS=(env LD_LIBRARY_PATH="$X615/lib" "$X615/libexec/mkfs.xfs" -c options="$X615/conf/lts_6.18.conf")
fi
[ "$(id -u)" = 0 ] || { echo "bench/mount.sh: run as root" >&2; exit 2; }
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
[[ " $TARGETS " != *" fuse2fs "* ]] || command -v fuse2fs >/dev/null || { echo "bench/mount.sh: fuse2fs is missing (apt-get install fuse2fs)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/mountbench.XXXXXX")
MNT=$WORK/mnt
mkdir -p "$MNT"
# FUSE over io_uring (xfskit-uring) needs the fuse module's permission;
# it is given for the run and put back after.
URING=/sys/module/fuse/parameters/enable_uring
URING_WAS=$(cat "$URING" 2>/dev/null || true)
if [[ " $TARGETS " == *" xfskit-uring"* ]]; then
    [ -w "$URING" ] || { echo "bench/mount.sh: $URING is missing (Linux 6.14+ needed for xfskit-uring)" >&2; exit 2; }
    echo Y > "$URING"
fi
cleanup() {
    mountpoint -q "$MNT" && umount -l "$MNT"
    rm -rf "$WORK"
    [ -z "$URING_WAS" ] || echo "$URING_WAS" > "$URING"
}
trap cleanup EXIT

tar -C "$(dirname "$SRC")" -cf "$WORK/src.tar" "$(basename "$SRC")" 2>/dev/null || true
echo "source tar: $(du -h "$WORK/src.tar" | cut -f1), $(tar -tf "$WORK/src.tar" | wc -l) entries; $FILES files"

# the log head of the unmounted image, as 512-byte blocks from the log's
# start counted over its cycles (cycle * log size + block)
log_head() {
    "$XFSKIT" log --json "$WORK/img" | python3 -c '
import json, subprocess, sys
j = json.load(sys.stdin)
bs = int(subprocess.check_output(["xfs_db", "-r", "-c", "sb 0", "-c", "print blocksize", sys.argv[1]]).split()[-1])
print(j["head"]["cycle"] * j["log_blocks"] * bs // 512 + j["head"]["block"])' "$WORK/img"
}

# fresh image (unless $2 is "again") + mount for target $1
mount_target() {
    if [ "${2:-}" != again ]; then
        rm -f "$WORK/img"
        truncate -s "$SIZE" "$WORK/img"
        case $1 in
            fuse2fs) mkfs.ext4 -q -F "$WORK/img" ;;
            *) "${MKFS_XFS[@]}" -q -f "$WORK/img" >/dev/null; H0=$(log_head) ;;
        esac
    fi
    case $1 in
        xfskit*)
            wb=; [[ $1 == *-wb ]] && wb=--writeback-cache
            ring=off; [[ $1 == *-uring* ]] && ring=on
            behind=on; [[ $1 == *-inplace ]] && behind=off
            # shellcheck disable=SC2086
            "$XFSKIT" mount $XFSKIT_ARGS $wb --io-uring $ring --write-behind $behind --threads "$THREADS" "$WORK/img" "$MNT" 2>"$WORK/server.log" &
            for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
            ;;
        kernel)
            mount -o loop "$WORK/img" "$MNT"
            ;;
        fuse2fs)
            # in the foreground, so that `wait` sees it finish writing
            fuse2fs -f "$WORK/img" "$MNT" >/dev/null 2>&1 &
            for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
            ;;
    esac
    mountpoint -q "$MNT" || { echo "mount of $1 failed" >&2; exit 1; }
}

finish() {
    # RELEASEs still on their way keep the mount busy for a moment
    for _ in $(seq 300); do umount "$MNT" 2>/dev/null && break; sleep 0.1; done
    ! mountpoint -q "$MNT" || { echo "cannot unmount $MNT" >&2; exit 1; }
    # the FUSE servers write the image back as they exit
    wait 2>/dev/null || true
    sync
}

small_files() { # ROOT COUNT DIRS PREFIX
    python3 - "$@" <<'PY'
import os, sys
root, n, dirs, pre = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = b"x" * 4096
for d in range(dirs):
    os.mkdir(f"{root}/{pre}{d}")
for i in range(n):
    fd = os.open(f"{root}/{pre}{i % dirs}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.close(fd)
PY
}

random_writes() { # FILE SECONDS: prints operations per second
    python3 - "$@" <<'PY'
import os, random, sys, time
path, secs = sys.argv[1], float(sys.argv[2])
size, blk = 256 << 20, 4096
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
chunk = b"\xa5" * (1 << 20)
for off in range(0, size, len(chunk)):
    os.pwrite(fd, chunk, off)
os.fsync(fd)
rng = random.Random(17)
data = b"\x5a" * blk
n = 0
t0 = time.monotonic()
end = t0 + secs
while True:
    for _ in range(256):
        os.pwrite(fd, data, rng.randrange(size // blk) * blk)
    n += 256
    if time.monotonic() >= end:
        break
os.fsync(fd)
os.close(fd)
print(f"{n / (time.monotonic() - t0):.0f}")
PY
}

now() { date +%s.%N; }
declare -A T L
for target in $TARGETS; do
    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); small_files "$MNT" "$FILES" 100 d; finish; t1=$(now)
    T[$target,a]=$(echo "$t1 - $t0" | bc)
    [ $target = fuse2fs ] || L[$target]=$(( ($(log_head) - H0) * 512 / FILES ))

    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); tar -C "$MNT" -xf "$WORK/src.tar"; finish; t1=$(now)
    T[$target,b]=$(echo "$t1 - $t0" | bc)

    mount_target $target again; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); find "$MNT" -ls >/dev/null; du -s "$MNT" >/dev/null; t1=$(now)
    T[$target,e]=$(echo "$t1 - $t0" | bc)
    finish

    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now)
    dd if=/dev/zero of="$MNT/big" bs=1M count=1024 conv=fsync status=none
    t1=$(now); finish
    T[$target,c]=$(echo "$t1 - $t0" | bc)

    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    T[$target,d]=$(random_writes "$MNT/rand" "$RANDSECS"); finish

    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now)
    for w in 0 1 2 3; do small_files "$MNT" $((FILES / 4)) 1 "w$w-" & done
    wait $(jobs -p | tail -4) 2>/dev/null || true
    finish; t1=$(now)
    T[$target,f]=$(echo "$t1 - $t0" | bc)
    echo "$target: a ${T[$target,a]} s, b ${T[$target,b]} s, c ${T[$target,c]} s," \
        "d ${T[$target,d]} writes/s, e ${T[$target,e]} s, f ${T[$target,f]} s" \
        "${L[$target]:+(a: ${L[$target]} log bytes per file)}"
done
if [ -n "${L[kernel]:-}" ]; then
    echo
    echo "log bytes per created file in (a):"
    for t in "${!L[@]}"; do
        echo "  $t ${L[$t]} ($(echo "100 * ${L[$t]} / ${L[kernel]}" | bc)% of the kernel's)"
    done
fi

# The kernel and fuse2fs are needed for the table, and at least one xfskit
# target; each xfskit target gets its column and its two ratios.
for t in kernel fuse2fs; do [[ " $TARGETS " == *" $t "* ]] || exit 0; done
X=()
for t in xfskit xfskit-uring xfskit-uring-inplace xfskit-wb xfskit-uring-wb; do [[ " $TARGETS " == *" $t "* ]] && X+=("$t"); done
[ ${#X[@]} -gt 0 ] || exit 0
head="| workload"; rule="|---"
for t in "${X[@]}"; do head+=" | $t"; rule+="|---"; done
head+=" | kernel XFS | fuse2fs ext4"; rule+="|---|---"
for t in "${X[@]}"; do head+=" | $t / fuse2fs speed | $t / kernel speed"; rule+="|---|---"; done
printf '\n%s |\n%s|\n' "$head" "$rule"
for w in a b c d e f; do
    k=${T[kernel,$w]}; f=${T[fuse2fs,$w]}
    if [ $w = d ]; then u=/s; n=%.0f; else u=" s"; n=%.2f; fi
    row="| $w"
    for t in "${X[@]}"; do row+=" | $(printf "$n" "${T[$t,$w]}")$u"; done
    row+=" | $(printf "$n" "$k")$u | $(printf "$n" "$f")$u"
    for t in "${X[@]}"; do
        x=${T[$t,$w]}
        if [ $w = d ]; then # operations per second: higher is faster
            rf=$(echo "$x / $f" | bc -l); rk=$(echo "100 * $x / $k" | bc -l)
        else # seconds: lower is faster
            rf=$(echo "$f / $x" | bc -l); rk=$(echo "100 * $k / $x" | bc -l)
        fi
        row+=" | $(printf %.2f "$rf")x | $(printf %.0f "$rk")%"
    done
    echo "$row |"
done
