#!/bin/bash
# What a FUSE round trip costs the read-write mount: the create loop of
# bench/mount.sh's (a) (FILES files of 4 KiB in 100 directories, timed from
# the first create to the last close, without the unmount) on
#   dev       `xfskit mount --io-uring off` (requests read from /dev/fuse,
#             fuser's threads pinned one per CPU and SCHED_IDLE by the watcher)
#   dev-normal  the same with XFSKIT_URING_NORMAL=1 (no watcher: fuser's
#             threads unpinned, at the normal policy)
#   uring     `--io-uring on`, queue threads SCHED_IDLE with the watcher,
#             WRITEs answered before they are done (write-behind, the default)
#   inplace   the same with `--write-behind off`
#   normal    `--io-uring on` with XFSKIT_URING_NORMAL=1 (queue threads
#             kept at the normal policy; write-behind off)
#   pinned    `--io-uring on`, the writer pinned to CPU 1 by taskset
#             (write-behind off)
#   kernel    the kernel's XFS on a loop device
#   dev-old   `dev` with the binary XFSKIT_OLD (another build, to tell a
#             regression from the machine's drift: rounds alternate)
# RUNS rounds of each, alternating; one line per run.
#
# Usage: bench/mount_rtt.sh (as root, Linux 6.14+; the fuse module's
#        enable_uring is turned on for the run and put back after)
# Env:   FILES (default 5000), RUNS (default 3), TARGETS (default
#        "dev dev-normal uring inplace normal pinned kernel"), XFSKIT (binary, default
#        target/release/xfskit, built if missing), XFSKIT_OLD (binary of
#        dev-old)
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-5000}
RUNS=${RUNS:-3}
TARGETS=${TARGETS:-dev dev-normal uring inplace normal pinned kernel}
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ "$(id -u)" = 0 ] || { echo "bench/mount_rtt.sh: run as root" >&2; exit 2; }
URING=/sys/module/fuse/parameters/enable_uring
[ -w "$URING" ] || { echo "bench/mount_rtt.sh: $URING is missing (Linux 6.14+)" >&2; exit 2; }
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/mountrtt.XXXXXX")
MNT=$WORK/mnt
mkdir -p "$MNT"
WAS=$(cat "$URING")
echo Y > "$URING"
cleanup() {
    mountpoint -q "$MNT" && umount -l "$MNT"
    rm -rf "$WORK"
    echo "$WAS" > "$URING"
}
trap cleanup EXIT

for run in $(seq "$RUNS"); do
    for t in $TARGETS; do
        rm -f "$WORK/img"; truncate -s 4G "$WORK/img"; mkfs.xfs -q -f "$WORK/img"
        env=(); ring=on; pin=(); behind=off; bin=$XFSKIT
        case $t in
            dev) ring=off ;;
            dev-normal) ring=off; env=(XFSKIT_URING_NORMAL=1) ;;
            dev-old) ring=off; bin=${XFSKIT_OLD:?dev-old needs XFSKIT_OLD} ;;
            uring) behind=on ;;
            normal) env=(XFSKIT_URING_NORMAL=1) ;;
            pinned) pin=(taskset -c 1) ;;
        esac
        if [ "$t" = kernel ]; then
            mount -o loop "$WORK/img" "$MNT"
        else
            env "${env[@]}" "$bin" mount --io-uring $ring --write-behind $behind --threads 2 "$WORK/img" "$MNT" 2>/dev/null &
            for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
        fi
        sync; echo 3 > /proc/sys/vm/drop_caches
        secs=$("${pin[@]}" python3 - "$MNT" "$FILES" <<'PY'
import os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
data = b"x" * 4096
for d in range(100):
    os.mkdir(f"{root}/d{d}")
t = time.monotonic()
for i in range(n):
    fd = os.open(f"{root}/d{i % 100}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.close(fd)
print(f"{time.monotonic() - t:.3f}")
PY
)
        for _ in $(seq 300); do umount "$MNT" 2>/dev/null && break; sleep 0.1; done
        wait 2>/dev/null || true
        echo "run $run $t: $secs s for $FILES files"
    done
done
