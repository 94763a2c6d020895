#!/bin/bash
# Side by side, in one run: the same workloads on a read-write `xfskit mount`,
# on the kernel's XFS (loop device) and on fuse2fs with ext4, each on a fresh
# image file of the same size, and the ratios. Every time includes the
# unmount, so each image is on disk and clean when the clock stops.
#
#   (a) FILES files of 4 KiB in 100 directories (the fs_mark workload)
#   (b) untar of a tar of SRC
#   (f) 4 writers at once, each FILES/4 files of 4 KiB in its own directory
#
# Usage: bench/mount.sh            (as root; needs xfsprogs, e2fsprogs, fuse2fs)
# Env:   FILES (default 20000), SRC (default /usr/share), SIZE (default 4G),
#        THREADS (xfskit serving threads, default 2), XFSKIT (binary,
#        default target/release/xfskit, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-20000}
SRC=${SRC:-/usr/share}
SIZE=${SIZE:-4G}
THREADS=${THREADS:-2}
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ "$(id -u)" = 0 ] || { echo "bench/mount.sh: run as root" >&2; exit 2; }
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
command -v fuse2fs >/dev/null || { echo "bench/mount.sh: fuse2fs is missing (apt-get install fuse2fs)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/mountbench.XXXXXX")
MNT=$WORK/mnt
mkdir -p "$MNT"
cleanup() {
    mountpoint -q "$MNT" && umount -l "$MNT"
    rm -rf "$WORK"
}
trap cleanup EXIT

tar -C "$(dirname "$SRC")" -cf "$WORK/src.tar" "$(basename "$SRC")" 2>/dev/null || true
echo "source tar: $(du -h "$WORK/src.tar" | cut -f1), $(tar -tf "$WORK/src.tar" | wc -l) entries; $FILES files"

# fresh image + mount for target $1
mount_target() {
    rm -f "$WORK/img"
    truncate -s "$SIZE" "$WORK/img"
    case $1 in
        xfskit)
            mkfs.xfs -q -f "$WORK/img"
            "$XFSKIT" mount --threads "$THREADS" "$WORK/img" "$MNT" 2>"$WORK/server.log" &
            for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
            ;;
        kernel)
            mkfs.xfs -q -f "$WORK/img"
            mount -o loop "$WORK/img" "$MNT"
            ;;
        fuse2fs)
            mkfs.ext4 -q -F "$WORK/img"
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

now() { date +%s.%N; }
declare -A T
for target in xfskit kernel fuse2fs; do
    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); small_files "$MNT" "$FILES" 100 d; finish; t1=$(now)
    T[$target,a]=$(echo "$t1 - $t0" | bc)

    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); tar -C "$MNT" -xf "$WORK/src.tar"; finish; t1=$(now)
    T[$target,b]=$(echo "$t1 - $t0" | bc)

    mount_target $target; sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now)
    for w in 0 1 2 3; do small_files "$MNT" $((FILES / 4)) 1 "w$w-" & done
    wait $(jobs -p | tail -4) 2>/dev/null || true
    finish; t1=$(now)
    T[$target,f]=$(echo "$t1 - $t0" | bc)
    echo "$target: a ${T[$target,a]} s, b ${T[$target,b]} s, f ${T[$target,f]} s"
done

printf '\n| workload | xfskit | kernel XFS | fuse2fs ext4 | xfskit / fuse2fs speed | xfskit / kernel speed |\n|---|---|---|---|---|---|\n'
for w in a b f; do
    x=${T[xfskit,$w]}; k=${T[kernel,$w]}; f=${T[fuse2fs,$w]}
    printf '| %s | %.2f s | %.2f s | %.2f s | %.2fx | %.0f%% |\n' "$w" "$x" "$k" "$f" \
        "$(echo "$f / $x" | bc -l)" "$(echo "100 * $k / $x" | bc -l)"
done
