#!/bin/bash
# Scale: how xfskit's time and memory grow with the number of inodes.
# Generates a tar stream of N inodes (directories of 1,000 files; one file
# in ten has 4 KiB of data, one in twenty an xattr, one in a hundred a
# second name), builds an image from it on stdin, then runs, each with a
# cold cache under /usr/bin/time: bulkstat, ls -R, check (with its default
# memory bound, and with 64 MiB, which spills), and xfs_repair -n
# beside them. Prints wall time, peak RSS and RSS per inode of each
# (a failed command prints why, and its row has what it used until then).
#
# Usage: bench/scale.sh N [N...]     (as root for the cold cache; e.g. 1000000)
# Env:   XFSKIT (binary, default target/release/xfskit, built if missing),
#        WORK (scratch directory, default /var/tmp; the tar is about N * 1 KiB,
#        the sparse image N * 3 KiB), REPAIR=0 to leave xfs_repair out
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: bench/scale.sh N [N...]" >&2; exit 2; }
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
X615=$PWD/../shared/xfsprogs-6.15
if [ -x "$X615/libexec/xfs_repair" ]; then
    REPAIR_CMD=(env LD_LIBRARY_PATH="$X615/lib" "$X615/libexec/xfs_repair" -n)
    DEFAULTS=()
else
    REPAIR_CMD=(xfs_repair -n)   # Debian's 6.1: images with its defaults
    DEFAULTS=(--defaults 6.1)
fi
DIR=$(mktemp -d "${WORK:-/var/tmp}/scale.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
IMG=$DIR/img

gen_tar() { # N: a tar stream on stdout
    python3 - "$1" <<'PY'
import io, sys, tarfile
n = int(sys.argv[1])
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT)
data = b"d" * 4096
def entry(name, kind=tarfile.REGTYPE, size=0, link=None, pax=None):
    t = tarfile.TarInfo(name)
    t.type, t.size, t.mode, t.mtime = kind, size, 0o755 if kind == tarfile.DIRTYPE else 0o644, 1700000000
    if link:
        t.linkname = link
    if pax:
        t.pax_headers = pax
    out.addfile(t, io.BytesIO(data[:size]) if size else None)
made = 0
d = 0
while made < n:
    top = f"d{d // 1000:04d}/s{d % 1000:03d}"
    if d % 1000 == 0:
        entry(f"d{d // 1000:04d}", tarfile.DIRTYPE); made += 1
    entry(top, tarfile.DIRTYPE); made += 1
    for i in range(min(1000, n - made)):
        k = made + i
        name = f"{top}/f{i:03d}"
        if k % 100 == 99 and i > 0:
            entry(name, tarfile.LNKTYPE, link=f"{top}/f{i - 1:03d}")
            continue
        pax = {"SCHILY.xattr.user.tag": "v" * 20} if k % 20 == 0 else None
        entry(name, size=4096 if k % 10 == 0 else 0, pax=pax)
    made += min(1000, n - made)
    d += 1
out.close()
PY
}

measure() { # LABEL N CMD...: one row
    local label=$1 n=$2; shift 2
    sync; echo 3 > /proc/sys/vm/drop_caches
    /usr/bin/time -f '%e %M' -o "$DIR/time" "$@" > /dev/null 2> "$DIR/err" || {
        echo "$label failed:"; tail -3 "$DIR/err"; }
    read -r secs kib < <(tail -n 1 "$DIR/time")
    printf '| %s | %s | %s s | %s MB | %s B |\n' "$n" "$label" "$secs" "$((kib / 1024))" "$((kib * 1024 / n))"
}

echo "| inodes | command | wall | peak RSS | RSS per inode |"
echo "|---|---|---|---|---|"
for n in "$@"; do
    rm -f "$IMG"
    # inodes may take a quarter of the space (imaxpct 25): 2 KiB per
    # inode for them, 1 KiB more for data and directories, 1 GiB spare
    size=$(( (n * 3072 / 1048576 + 1024) ))m
    gen_tar "$n" > "$DIR/src.tar"
    measure "build (tar on stdin, --size $size)" "$n" \
        bash -c "\"$XFSKIT\" build ${DEFAULTS[*]:-} - \"$IMG\" --size $size < \"$DIR/src.tar\""
    rm -f "$DIR/src.tar"
    measure "bulkstat --json" "$n" "$XFSKIT" bulkstat --json "$IMG"
    measure "ls -R" "$n" "$XFSKIT" ls -R "$IMG" /
    measure "check" "$n" "$XFSKIT" check "$IMG"
    measure "check --memory 64m" "$n" "$XFSKIT" check --memory 64m --tmpdir "$DIR" "$IMG"
    [ "${REPAIR:-1}" = 0 ] || measure "xfs_repair -n ($("${REPAIR_CMD[@]}" -V 2>/dev/null | head -1 | awk '{print $3}'))" "$n" "${REPAIR_CMD[@]}" "$IMG"
done
