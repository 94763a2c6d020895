#!/usr/bin/env bash
# Read throughput of one XFS image through several readers, cold cache:
#   kernel  - the kernel's XFS on a read-only loop mount
#   xfskit  - `xfskit mount --read-only` (FUSE)
#   xfsfuse - the xfs-fuse crate (FUSE), if its binary is found
#   NAME=PATH - another xfskit binary (say an older build) under its own name
# Workloads (WORKLOADS, default all four):
#   seq   sequential 1 MiB reads of a 1 GiB file (dd)
#   rand  random 4 KiB reads of that file by one reader (fio psync, or python)
#   randq random 4 KiB reads by JOBS concurrent readers (default 4): real
#         random-read loads keep more than one request in flight
#   small reading random 4 KiB files (open+read+close, python)
# Needs root. Usage: bench/read.sh [WORKDIR]
# (env: XFSKIT, XFSFUSE, RUNTIME, SMALL, JOBS, WORKLOADS,
#  READERS="kernel xfskit xfsfuse", ROUNDS)
# Every reader is measured ROUNDS times (default 5); in each round the readers
# take turns, and the round's first reader rotates, so neither a burst of load
# elsewhere on the machine nor going first favours one of them. Each cell is
# the median of the rounds, with the lowest and highest value beside it.
set -euo pipefail
WORK=${1:-/tmp/xfskit-bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
XFSKIT=${XFSKIT:-$ROOT/target/release/xfskit}
XFSFUSE=${XFSFUSE:-$(command -v xfs-fuse || echo /tmp/xfsfuse/bin/xfs-fuse)}
RUNTIME=${RUNTIME:-10}
SMALL=${SMALL:-20000}
ROUNDS=${ROUNDS:-5}
JOBS=${JOBS:-4}
WORKLOADS=${WORKLOADS:-seq rand randq small}
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
    *=*) "${1#*=}" mount --read-only "$IMG" "$MNT" 2>"$WORK/${1%%=*}.log" & PID=$! ;;
    *) echo "unknown reader $1" >&2; return 1 ;;
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
rand_iops() {  # IOPS of random 4 KiB reads in the big file by $1 readers
    drop
    local jobs=$1
    if command -v fio >/dev/null; then
        fio --name=r --filename="$MNT/big" --rw=randread --bs=4k --ioengine=psync --numjobs="$jobs" \
            --group_reporting --runtime="$RUNTIME" --time_based --invalidate=1 --output-format=json 2>/dev/null |
            python3 -c "import json,sys; print('%.0f' % json.load(sys.stdin)['jobs'][0]['read']['iops'])"
    else
        python3 - "$MNT/big" "$RUNTIME" "$jobs" <<'PY'
import os, random, sys, time
from multiprocessing import Pool
def run(args):
    path, rt = args
    fd = os.open(path, os.O_RDONLY); size = os.fstat(fd).st_size; end = time.time() + rt; n = 0
    while time.time() < end:
        os.pread(fd, 4096, random.randrange(size // 4096) * 4096); n += 1
    return n
rt, jobs = float(sys.argv[2]), int(sys.argv[3])
with Pool(jobs) as p: print("%.0f" % (sum(p.map(run, [(sys.argv[1], rt)] * jobs)) / rt))
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

if [ -z "${READERS:-}" ]; then
    READERS="kernel xfskit"
    if [ -x "$XFSFUSE" ]; then READERS="$READERS xfsfuse"; else echo "xfs-fuse not found at $XFSFUSE; skipping it" >&2; fi
fi
name() { echo "${1%%=*}"; }
stats() {  # "median (min-max)" of the arguments
    python3 -c "import statistics,sys; v=list(map(float, sys.argv[1:])); print('%.0f (%.0f-%.0f)' % (statistics.median(v), min(v), max(v)))" "$@"
}
median() { python3 -c "import statistics,sys; print('%.0f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }
measure() {  # one workload on the mounted reader
    case $1 in
    seq) seq_mbs ;; rand) rand_iops 1 ;; randq) rand_iops "$JOBS" ;; small) small_fps ;;
    *) echo "unknown workload $1" >&2; return 1 ;;
    esac
}
declare -A ALL
read -ra RLIST <<<"$READERS"
for round in $(seq "$ROUNDS"); do
    n=${#RLIST[@]}
    for k in $(seq 0 $((n - 1))); do
        r=${RLIST[$(((k + round - 1) % n))]}
        mount_as "$r"
        line="round $round $(name "$r"):"
        for w in $WORKLOADS; do
            v=$(measure "$w")
            ALL[$r.$w]="${ALL[$r.$w]:-} $v"
            line="$line $w $v"
        done
        unmount_as "$r"
        echo "$line" >&2
    done
done

declare -A HEAD=([seq]="seq 1MiB MB/s" [rand]="rand4k IOPS" [randq]="rand4k x$JOBS IOPS" [small]="small files/s")
printf '\n%-8s' reader
for w in $WORKLOADS; do printf ' %22s' "${HEAD[$w]}"; done
echo
declare -A MED
for r in $READERS; do
    printf '%-8s' "$(name "$r")"
    for w in $WORKLOADS; do
        # shellcheck disable=SC2086  # word splitting of the lists is wanted
        printf ' %22s' "$(stats ${ALL[$r.$w]})"
        # shellcheck disable=SC2086
        MED[$(name "$r").$w]=$(median ${ALL[$r.$w]})
    done
    echo
done
echo "(median of $ROUNDS rounds, lowest-highest in brackets; RUNTIME=${RUNTIME}s per random workload)"

ratio() { python3 -c "print('%.2f' % ($1/$2) if $2 else 'n/a')"; }
for r in $READERS; do
    a=$(name "$r")
    [ "$a" = kernel ] && continue
    for b in kernel xfsfuse; do
        [ "$a" = "$b" ] || [ -z "${MED[$b.${WORKLOADS%% *}]:-}" ] && continue
        line="$a/$b:"
        for w in $WORKLOADS; do line="$line $w $(ratio "${MED[$a.$w]}" "${MED[$b.$w]}")"; done
        echo "$line"
    done
done
