#!/bin/bash
# What parent pointers cost, side by side in one run: the same namespace
# workload on a read-write `xfskit mount` and on the kernel's XFS (loop
# device), each on a fresh image made by mkfs.xfs 6.15 with the defaults
# of xfsprogs 6.1 (no parent pointers) and of 6.18 (parent pointers,
# exchange-range, rmapbt, nrext64). Each run is timed to the unmount; the
# log bytes per created file are how far the log head moved from the new
# image to the unmounted one (read with `xfskit log --json`).
#
#   create  FILES files of 4 KiB in 100 directories (as bench/mount.sh (a))
#   names   then one hard link to each in another directory, each file
#           renamed within its directory, the links unlinked
#
# Usage: bench/pptr.sh   (as root; needs ../shared/xfsprogs-6.15)
# Env:   FILES (default 20000), SIZE (default 4G), THREADS (default 2),
#        XFSKIT (binary, default target/release/xfskit, built if missing),
#        FEATS (default "6.1 6.18": the lts_*.conf defaults compared)
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-20000}
SIZE=${SIZE:-4G}
THREADS=${THREADS:-2}
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
X615=$PWD/../shared/xfsprogs-6.15
[ "$(id -u)" = 0 ] || { echo "bench/pptr.sh: run as root" >&2; exit 2; }
[ -x "$X615/libexec/mkfs.xfs" ] || { echo "bench/pptr.sh: needs $X615" >&2; exit 2; }
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/pptrbench.XXXXXX")
MNT=$WORK/mnt
mkdir -p "$MNT"
cleanup() { mountpoint -q "$MNT" && umount -l "$MNT"; rm -rf "$WORK"; }
trap cleanup EXIT

log_head() { # 512-byte blocks from the log's start over its cycles
    local bs
    bs=$("$XFSKIT" info --json "$WORK/img" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["bsize"])')
    "$XFSKIT" log --json "$WORK/img" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j["head"]["cycle"] * j["log_blocks"] * int(sys.argv[1]) // 512 + j["head"]["block"])' "$bs"
}

fresh() { # FEATURES TARGET
    rm -f "$WORK/img"; truncate -s "$SIZE" "$WORK/img"
    LD_LIBRARY_PATH="$X615/lib" "$X615/libexec/mkfs.xfs" -q -f \
        -c options="$X615/conf/lts_$1.conf" "$WORK/img" >/dev/null
    H0=$(log_head)
    if [ "$2" = kernel ]; then
        mount -o loop "$WORK/img" "$MNT"
    else
        "$XFSKIT" mount --threads "$THREADS" "$WORK/img" "$MNT" 2>"$WORK/server.log" &
        for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
    fi
    mountpoint -q "$MNT" || { echo "mount of $2 failed" >&2; exit 1; }
}

finish() {
    for _ in $(seq 300); do umount "$MNT" 2>/dev/null && break; sleep 0.1; done
    ! mountpoint -q "$MNT" || { echo "cannot unmount $MNT" >&2; exit 1; }
    wait 2>/dev/null || true
    sync
}

work() { # ROOT PHASE
    python3 - "$@" "$FILES" <<'PY'
import os, sys
root, phase, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = b"x" * 4096
if phase == "create":
    for d in range(100):
        os.mkdir(f"{root}/d{d}")
    for i in range(n):
        fd = os.open(f"{root}/d{i % 100}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.close(fd)
else:
    os.mkdir(f"{root}/links")
    for i in range(n):
        os.link(f"{root}/d{i % 100}/f{i}", f"{root}/links/l{i}")
    for i in range(n):
        os.rename(f"{root}/d{i % 100}/f{i}", f"{root}/d{i % 100}/g{i}")
    for i in range(n):
        os.unlink(f"{root}/links/l{i}")
PY
}

now() { date +%s.%N; }
declare -A T L
for feat in ${FEATS:-6.1 6.18}; do
    for target in xfskit kernel; do
        for phase in create names; do
            if [ $phase = create ]; then
                fresh $feat $target
            else
                # the tree of the create phase, remounted
                if [ $target = kernel ]; then mount -o loop "$WORK/img" "$MNT"; else
                    "$XFSKIT" mount --threads "$THREADS" "$WORK/img" "$MNT" 2>"$WORK/server.log" &
                    for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
                fi
                H0=$(log_head)
            fi
            sync; echo 3 > /proc/sys/vm/drop_caches
            t0=$(now); work "$MNT" $phase; finish; t1=$(now)
            T[$feat,$target,$phase]=$(echo "$t1 - $t0" | bc)
            L[$feat,$target,$phase]=$(( ($(log_head) - H0) * 512 / FILES ))
            echo "$feat $target $phase: ${T[$feat,$target,$phase]} s, ${L[$feat,$target,$phase]} log bytes per file"
        done
    done
done
echo
echo "| defaults | workload | xfskit | kernel | xfskit / kernel speed | xfskit log bytes per file | kernel log bytes per file |"
echo "|---|---|---|---|---|---|---|"
for feat in ${FEATS:-6.1 6.18}; do
    for phase in create names; do
        x=${T[$feat,xfskit,$phase]} k=${T[$feat,kernel,$phase]}
        printf '| %s | %s | %.2f s | %.2f s | %.0f%% | %s | %s |\n' "$feat" "$phase" "$x" "$k" \
            "$(echo "100 * $k / $x" | bc -l)" "${L[$feat,xfskit,$phase]}" "${L[$feat,kernel,$phase]}"
    done
done
