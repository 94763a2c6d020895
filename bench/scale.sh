#!/bin/bash
# Scale: how xfskit's time and memory grow with the number of inodes.
# Generates a tar stream of N inodes (directories of 1,000 files; one file
# in ten has 4 KiB of data, one in twenty an xattr, one in a hundred a
# second name; DATA_EVERY sets the one-in-ten), builds an image from it on stdin, then runs, each with a
# cold cache under /usr/bin/time: bulkstat, ls -R, check (with its default
# memory bound, and with 64 MiB, which spills), and xfs_repair -n
# beside them. Prints wall time, peak RSS and RSS per inode of each
# (a failed command prints why, and its row has what it used until then).
#
# Usage: bench/scale.sh N [N...]     (as root for the cold cache; e.g. 1000000)
# Env:   XFSKIT (binary, default target/release/xfskit, built if missing),
#        WORK (scratch directory, default /var/tmp; the tar is kept compressed
#        by zstd, about N * 5 B, and decompressed into the build's stdin,
#        the sparse image N * 3 KiB), REPAIR=0 to leave xfs_repair out,
#        DATA_EVERY (default 10: one file in ten has 4 KiB of data; 100 makes
#        a 50M-inode image of about 28 GB instead of 47 GB)
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
    # ustar headers made by hand (tarfile's objects take most of the
    # time at tens of millions of entries).
    python3 - "$1" "${DATA_EVERY:-10}" <<'PY'
import sys
n = int(sys.argv[1])
every = int(sys.argv[2])
w = sys.stdout.buffer.write
def header(name, typ, size=0, mode=0o644, link=""):
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"%07o\0" % mode
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % 1700000000
    h[148:156] = b" " * 8
    h[156:157] = typ
    h[157:157 + len(link)] = link.encode()
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)
def entry(name, typ=b"0", size=0, link="", xattr=None):
    if xattr:
        rec = "SCHILY.xattr.user.tag=%s\n" % xattr
        ln = len(rec) + 3
        ln = len(rec) + len(str(ln)) + 1
        body = ("%d %s" % (ln, rec)).encode()
        w(header("PaxHeader/" + name[-80:], b"x", len(body)))
        w(body + bytes(-len(body) % 512))
    w(header(name, typ, size, 0o755 if typ == b"5" else 0o644, link))
    if size:
        w(b"d" * size + bytes(-size % 512))
made = 0
d = 0
while made < n:
    top = f"d{d // 1000:04d}/s{d % 1000:03d}"
    if d % 1000 == 0:
        entry(f"d{d // 1000:04d}/", b"5"); made += 1
    entry(top + "/", b"5"); made += 1
    for i in range(min(1000, n - made)):
        k = made + i
        name = f"{top}/f{i:03d}"
        if k % 100 == 99 and i > 0:
            entry(name, b"1", link=f"{top}/f{i - 1:03d}")
            continue
        entry(name, size=4096 if k % every == 0 else 0, xattr="v" * 20 if k % 20 == 0 else None)
    made += min(1000, n - made)
    d += 1
w(bytes(1024))
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
    # inode for them, 1 KiB more for directories, the data, 1 GiB spare
    size=$(( (n * 3072 / 1048576 + n / ${DATA_EVERY:-10} * 4096 / 1048576 + 1024) ))m
    # Compressed: the tar of 50M entries is 50 GB, its zstd a few.
    gen_tar "$n" | zstd -q -1 -T0 > "$DIR/src.tar.zst"
    measure "build (tar on stdin, --size $size)" "$n" \
        bash -c "zstd -dc \"$DIR/src.tar.zst\" | \"$XFSKIT\" build ${DEFAULTS[*]:-} - \"$IMG\" --size $size"
    rm -f "$DIR/src.tar.zst"
    measure "bulkstat --json" "$n" "$XFSKIT" bulkstat --json "$IMG"
    measure "ls -R" "$n" "$XFSKIT" ls -R "$IMG" /
    measure "check" "$n" "$XFSKIT" check "$IMG"
    measure "check --memory 64m" "$n" "$XFSKIT" check --memory 64m --tmpdir "$DIR" "$IMG"
    [ "${REPAIR:-1}" = 0 ] || measure "xfs_repair -n ($("${REPAIR_CMD[@]}" -V 2>/dev/null | head -1 | awk '{print $3}'))" "$n" "${REPAIR_CMD[@]}" "$IMG"
done
