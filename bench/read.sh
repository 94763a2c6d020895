#!/usr/bin/env bash
# Read throughput of one XFS image through three readers, cold cache:
#   kernel  - the kernel's XFS on a read-only loop mount
#   xfskit  - `xfskit mount --read-only` (FUSE)
#   xfsfuse - the xfs-fuse crate (FUSE), if its binary is found
# Workloads: sequential 1 MiB reads of a 1 GiB file (dd), random 4 KiB reads
# of that file (fio, or python if fio is missing), and reading many random
# 4 KiB files (open+read+close, python).
# Needs root. Usage: bench/read.sh [WORKDIR]
# (env: XFSKIT, XFSFUSE, RUNTIME, SMALL, READERS="kernel xfskit xfsfuse", ROUNDS)
# With ROUNDS=N every reader is measured N times, the readers taking turns
# (so a burst of load elsewhere on the machine hits all of them), and the
# median of each workload is reported.
set -euo pipefail
WORK=${1:-/tmp/xfskit-bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
XFSKIT=${XFSKIT:-$ROOT/target/release/xfskit}
XFSFUSE=${XFSFUSE:-$(command -v xfs-fuse || echo /tmp/xfsfuse/bin/xfs-fuse)}
RUNTIME=${RUNTIME:-10}
SMALL=${SMALL:-20000}
ROUNDS=${ROUNDS:-1}
IMG=$WORK/img
MNT=$WORK/mnt
[ "$(id -u)" = 0 ] || { echo "bench/read.sh: needs root" >&2; exit 2; }
[ -x "$XFSKIT" ] || { echo "build first: cargo build --release -p xfskit-cli" >&2; exit 2; }
mkdir -p "$WORK" "$MNT"

cleanup() { mountpoint -q "$MNT" && umount "$MNT" 2>/dev/null || true; }
trap cleanup EXIT

if [ ! -f "$IMG" ]; then
    echo "making $IMG (1 GiB file + $SMALL 4 KiB files)..." >&2
    truncate -s 3G "$IMG"
    mkfs.xfs -q -f "$IMG"
    mount -o loop "$IMG" "$MNT"
    head -c 1G /dev/urandom > "$MNT/big"
    python3 - "$MNT" "$SMALL" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
blob = os.urandom(4096)
for i in range(n):
    d = os.path.join(root, "small", "%03d" % (i // 1000))
    if i % 1000 == 0: os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%06d" % i), "wb") as f: f.write(blob)
PY
    umount "$MNT"
fi

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

PID=
mount_as() {
    case $1 in
    kernel) mount -o loop,ro "$IMG" "$MNT" ;;
    xfskit) "$XFSKIT" mount --read-only "$IMG" "$MNT" 2>"$WORK/xfskit.log" & PID=$! ;;
    xfsfuse) "$XFSFUSE" -f "$IMG" "$MNT" 2>"$WORK/xfsfuse.log" & PID=$! ;;
    esac
    for _ in $(seq 100); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
    echo "mount as $1 failed" >&2; return 1
}
unmount_as() {
    case $1 in
    kernel) umount "$MNT" ;;
    *) kill -TERM "$PID" 2>/dev/null || true; sleep 0.5
       mountpoint -q "$MNT" && { fusermount3 -u "$MNT" || umount -l "$MNT"; }
       wait "$PID" 2>/dev/null || true ;;
    esac
}

seq_mbs() {  # MB/s of dd bs=1M over the big file
    drop
    local t0 t1
    t0=$(date +%s.%N); dd if="$MNT/big" of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
    python3 -c "print('%.0f' % (1073741824/1e6/($t1-$t0)))"
}
rand_iops() {  # IOPS of random 4 KiB reads in the big file
    drop
    if command -v fio >/dev/null; then
        fio --name=r --filename="$MNT/big" --rw=randread --bs=4k --ioengine=psync --numjobs=1 \
            --runtime="$RUNTIME" --time_based --invalidate=1 --output-format=json 2>/dev/null |
            python3 -c "import json,sys; print('%.0f' % json.load(sys.stdin)['jobs'][0]['read']['iops'])"
    else
        python3 - "$MNT/big" "$RUNTIME" <<'PY'
import os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); size = os.fstat(fd).st_size; end = time.time() + float(sys.argv[2]); n = 0
while time.time() < end:
    os.pread(fd, 4096, random.randrange(size // 4096) * 4096); n += 1
print("%.0f" % (n / float(sys.argv[2])))
PY
    fi
}
small_fps() {  # random small files read per second (open + read + close)
    drop
    python3 - "$MNT/small" "$SMALL" "$RUNTIME" <<'PY'
import os, random, sys, time
root, n, rt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
random.seed(1); end = time.time() + rt; k = 0
while time.time() < end:
    i = random.randrange(n)
    with open(os.path.join(root, "%03d" % (i // 1000), "f%06d" % i), "rb") as f: f.read()
    k += 1
print("%.0f" % (k / rt))
PY
}

declare -A SEQ RND SML
if [ -z "${READERS:-}" ]; then
    READERS="kernel xfskit"
    if [ -x "$XFSFUSE" ]; then READERS="$READERS xfsfuse"; else echo "xfs-fuse not found at $XFSFUSE; skipping it" >&2; fi
fi
median() { python3 -c "import statistics,sys; print('%.0f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }
declare -A ALLSEQ ALLRND ALLSML
for round in $(seq "$ROUNDS"); do
    for r in $READERS; do
        mount_as "$r"
        s=$(seq_mbs); n=$(rand_iops); m=$(small_fps)
        unmount_as "$r"
        ALLSEQ[$r]="${ALLSEQ[$r]:-} $s"; ALLRND[$r]="${ALLRND[$r]:-} $n"; ALLSML[$r]="${ALLSML[$r]:-} $m"
        echo "round $round $r: seq $s MB/s, rand4k $n IOPS, small files $m/s" >&2
    done
done
for r in $READERS; do
    # shellcheck disable=SC2086  # word splitting of the lists is wanted
    SEQ[$r]=$(median ${ALLSEQ[$r]}); RND[$r]=$(median ${ALLRND[$r]}); SML[$r]=$(median ${ALLSML[$r]})
done

ratio() { python3 -c "print('%.2f' % ($1/$2) if $2 else 'n/a')"; }
printf '\n%-8s %12s %14s %14s\n' reader "seq MB/s" "rand4k IOPS" "small files/s"
for r in $READERS; do printf '%-8s %12s %14s %14s\n' "$r" "${SEQ[$r]}" "${RND[$r]}" "${SML[$r]}"; done
echo
[ -n "${SEQ[kernel]:-}" ] && [ -n "${SEQ[xfskit]:-}" ] &&
printf 'xfskit/kernel:  seq %s  rand %s  small %s\n' "$(ratio "${SEQ[xfskit]}" "${SEQ[kernel]}")" \
    "$(ratio "${RND[xfskit]}" "${RND[kernel]}")" "$(ratio "${SML[xfskit]}" "${SML[kernel]}")"
if [ -n "${SEQ[xfsfuse]:-}" ] && [ -n "${SEQ[xfskit]:-}" ]; then
    printf 'xfskit/xfsfuse: seq %s  rand %s  small %s\n' "$(ratio "${SEQ[xfskit]}" "${SEQ[xfsfuse]}")" \
        "$(ratio "${RND[xfskit]}" "${RND[xfsfuse]}")" "$(ratio "${SML[xfskit]}" "${SML[xfsfuse]}")"
fi
