#!/bin/bash
# Cold-cache bulkstat benchmark: xfskit (userspace, unmounted image) against
# the kernel's bulkstat ioctl and find(1) on the loop-mounted image.
#
# Usage (as root):  N=200000 DIRS=200 bench/bulkstat.sh
#   N     inodes to create (default 1000000)
#   DIRS  directories to spread them over (default 1000)
#   IMG   image path (default /tmp/xfskit-bench-bulkstat.img; kept for reruns
#         unless REBUILD=1)
#   SIZE  image size (default 8G, sparse)
set -euo pipefail

N=${N:-1000000}
DIRS=${DIRS:-1000}
IMG=${IMG:-/tmp/xfskit-bench-bulkstat.img}
SIZE=${SIZE:-8G}
MNT=${MNT:-/tmp/xfskit-bench-bulkstat.mnt}
REBUILD=${REBUILD:-0}

[ "$(id -u)" = 0 ] || { echo "bench/bulkstat.sh: needs root (loop mount, drop_caches)" >&2; exit 1; }
cd "$(dirname "$0")/.."
cargo build --release -q -p xfskit-cli
XFSKIT=$PWD/target/release/xfskit
mkdir -p "$MNT"
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; true; }
trap cleanup EXIT

stamp="$IMG.n$N.d$DIRS"
if [ "$REBUILD" = 1 ] || [ ! -e "$stamp" ] || [ ! -e "$IMG" ]; then
    echo "making $IMG with $N inodes in $DIRS directories..."
    rm -f "$IMG" "$IMG".n*
    truncate -s "$SIZE" "$IMG"
    mkfs.xfs -q -f "$IMG"
    mount -o loop "$IMG" "$MNT"
    per=$(( (N + DIRS - 1) / DIRS ))
    made=0
    for ((d = 0; d < DIRS && made < N; d++)); do
        n=$(( N - made < per ? N - made : per ))
        mkdir "$MNT/d$d"
        (cd "$MNT/d$d" && seq -f 'f%.0f' 1 "$n" | xargs touch)
        made=$((made + n))
    done
    umount "$MNT"
    touch "$stamp"
fi
AGS=$(xfs_db -r -c 'sb 0' -c 'p agcount' "$IMG" | awk '{print $3}')

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
declare -a NAMES SECS COUNTS

bench() { # name count-command...
    local name=$1; shift
    drop
    local t0 t1 out
    t0=$(now)
    out=$("$@")
    t1=$(now)
    NAMES+=("$name"); SECS+=("$(echo "$t1 - $t0" | bc -l)"); COUNTS+=("$out")
}

xfskit_json() { "$XFSKIT" bulkstat "$IMG" --json | wc -l; }
xfskit_table() { "$XFSKIT" bulkstat "$IMG" | tail -n +2 | wc -l; }
xfskit_1t() { "$XFSKIT" bulkstat "$IMG" --json --threads 1 | wc -l; }
kernel_one() { xfs_io -c bulkstat "$MNT" | grep -c '^bs_ino'; }
kernel_per_ag() {
    local ag tmp; tmp=$(mktemp -d)
    for ((ag = 0; ag < AGS; ag++)); do
        xfs_io -c "bulkstat -a $ag" "$MNT" | grep -c '^bs_ino' > "$tmp/$ag" &
    done
    wait
    cat "$tmp"/* | awk '{s += $1} END {print s}'; rm -rf "$tmp"
}
find_walk() { find "$MNT" -printf '%i %m %s\n' | wc -l; }

bench "xfskit bulkstat --json" xfskit_json
bench "xfskit bulkstat --json --threads 1" xfskit_1t
bench "xfskit bulkstat (table)" xfskit_table
mount -o loop,ro "$IMG" "$MNT"
bench "xfs_io bulkstat (1 process)" kernel_one
bench "xfs_io bulkstat -a AG ($AGS processes)" kernel_per_ag
bench "find -printf '%i %m %s'" find_walk
umount "$MNT"

echo
echo "N=$N inodes requested, $DIRS directories, $AGS AGs, $(nproc) CPUs, cold cache each run"
printf '%-40s %10s %10s %12s %8s\n' "method" "inodes" "seconds" "inodes/s" "vs xfskit"
base=$(echo "${COUNTS[0]} / ${SECS[0]}" | bc -l)
for i in "${!NAMES[@]}"; do
    rate=$(echo "${COUNTS[$i]} / ${SECS[$i]}" | bc -l)
    printf '%-40s %10d %10.3f %12.0f %8.2f\n' "${NAMES[$i]}" "${COUNTS[$i]}" "${SECS[$i]}" "$rate" "$(echo "$rate / $base" | bc -l)"
done
