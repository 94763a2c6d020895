#!/usr/bin/env bash
# Cold-cache extraction benchmark: `xfskit extract` against the kernel
# (`mount -o loop,ro` + `cp -a` + `umount`), on (a) one 1 GiB file and
# (b) 100,000 small files. Needs root (loop mounts, drop_caches).
#
# Usage: bench/extract.sh [WORKDIR]   (default: a fresh directory under /var/tmp)
# Environment: XFSKIT=path/to/xfskit (default: target/release/xfskit, built if missing)
#              SMALL_FILES=N (default 100000), BIG_MIB=N (default 1024)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
xfskit=${XFSKIT:-$here/target/release/xfskit}
small_files=${SMALL_FILES:-100000}
big_mib=${BIG_MIB:-1024}
work=${1:-$(mktemp -d /var/tmp/xfskit-bench.XXXXXX)}
mkdir -p "$work"

[ "$(id -u)" = 0 ] || { echo "bench/extract.sh: needs root (loop mounts, drop_caches)" >&2; exit 2; }
if [ ! -x "$xfskit" ]; then
    (cd "$here" && cargo build --release -q -p xfskit-cli)
fi

mounts=()
cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done
}
trap cleanup EXIT

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Destination: a scratch XFS filesystem, so both copies write to the same
# kind of filesystem (and large xattrs fit).
dst_img=$work/dst.img
truncate -s 8G "$dst_img"
mkfs.xfs -q -f "$dst_img"
mkdir -p "$work/dst"
mount -o loop "$dst_img" "$work/dst"
mounts+=("$work/dst")

# make_image NAME SIZE POPULATE_FUNCTION
make_image() {
    local img=$work/$1.img
    truncate -s "$2" "$img"
    mkfs.xfs -q -f "$img"
    mkdir -p "$work/src"
    mount -o loop "$img" "$work/src"
    "$3" "$work/src"
    umount "$work/src"
}

populate_big() {
    dd if=/dev/urandom of="$1/big" bs=1M count="$big_mib" status=none
}

populate_small() {
    python3 - "$1" "$small_files" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per_dir = 1000
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // per_dir))
    if i % per_dir == 0:
        os.mkdir(d)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(os.urandom(512 + (i * 37) % 7000))
EOF
}

# time_cmd: prints elapsed seconds of "$@"
time_cmd() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

kernel_copy() { # IMAGE DEST
    mkdir -p "$work/kmnt"
    mount -o loop,ro "$1" "$work/kmnt"
    cp -a "$work/kmnt/." "$2"
    umount "$work/kmnt"
}

results=()
run_case() { # NAME LABEL
    local img=$work/$1.img
    rm -rf "$work/dst/x" "$work/dst/k"
    drop_caches
    local tx; tx=$(time_cmd "$xfskit" extract -q "$img" "$work/dst/x")
    drop_caches
    mkdir -p "$work/dst/k"
    local tk; tk=$(time_cmd kernel_copy "$img" "$work/dst/k")
    # Same tree on both sides (contents and names).
    if ! diff -r -q "$work/dst/x" "$work/dst/k" >/dev/null; then
        echo "bench: $1: the two copies differ" >&2
        exit 1
    fi
    results+=("$(printf '%-22s %10.2f %12.2f %8.2f' "$2" "$tx" "$tk" "$(awk -v a="$tx" -v b="$tk" 'BEGIN { printf "%.3f", a / b }')")")
    rm -rf "$work/dst/x" "$work/dst/k"
}

echo "building images in $work ..." >&2
make_image big $(( big_mib + 600 ))M populate_big
run_case big "1 GiB file"
make_image small 2G populate_small
run_case small "$small_files small files"

printf '%-22s %10s %12s %8s\n' case "xfskit(s)" "mount+cp(s)" ratio
printf '%s\n' "${results[@]}"
