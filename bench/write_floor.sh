#!/bin/bash
# The device's share of a build: how long the writes of `xfskit build`
# take on this machine when nothing else runs.
#
# Records the image writes of one build with strace (offset, length, and
# whether they went through the O_DIRECT handle), then replays exactly
# those writes, in the same order and sizes (direct ones as 4 KiB pieces,
# as the build hands them), into a fresh sparse file of the same size,
# and fsyncs it. No parsing, no engine, no other thread competes: the
# replay time is a floor under the build's wall time on this disk, and
# files / floor is the most files per second this disk allows for the
# tree (the build's own time is printed beside it).
#
# Usage: bench/write_floor.sh SOURCE SIZE [ROUNDS]
#   e.g. bench/write_floor.sh target/bench-build/t100k.tar 600M 3
# Env:   XFSKIT  xfskit binary (default target/release/xfskit)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$1; SIZE=$2; ROUNDS=${3:-3}
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
command -v strace >/dev/null || { echo "write_floor: needs strace" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/write-floor.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
IMG=$WORK/image.img

# The build's own wall time (median of ROUNDS, page cache warm).
cat "$SRC" >/dev/null 2>&1 || true
for _ in $(seq "$ROUNDS"); do
    rm -f "$IMG"; sync
    /usr/bin/time -f "%e" -a -o "$WORK/build.txt" "$XFSKIT" build -q "$SRC" "$IMG" --size "$SIZE" -f
done
rm -f "$IMG"; sync
strace -f -y -qq -e trace=openat,pwritev,pwrite64,pwritev2,write -o "$WORK/trace.txt" \
    "$XFSKIT" build -q "$SRC" "$IMG" --size "$SIZE" -f
FILES=$( (find "$SRC" -type f 2>/dev/null || true) | wc -l)
if [ -f "$SRC" ]; then FILES=$(tar -tvf "$SRC" | grep -c '^-' || true); fi
rm -f "$IMG"

python3 - "$WORK/trace.txt" "$IMG" "$ROUNDS" "$WORK/build.txt" "$FILES" "$SIZE" <<'PY'
import mmap, os, re, statistics, sys, time
trace, img, rounds, build_txt, files, size = sys.argv[1:7]
rounds, files = int(rounds), int(files)
units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
img_len = int(size[:-1]) * units[size[-1].upper()] if size[-1].upper() in units else int(size)
# fd -> direct?, from the image's openat calls (strace -y names the file).
direct, ops = {}, []
name = os.path.basename(img)
for line in open(trace):
    m = re.search(r'openat\(.*"([^"]*)", ([A-Z_|]+).*\) = (\d+)<', line)
    if m and os.path.basename(m.group(1)) == name:
        direct[int(m.group(3))] = 'O_DIRECT' in m.group(2)
        continue
    m = re.search(r'(pwritev2?|pwrite64)\((\d+)<([^>]*)>, .*, (\d+)(?:, \d+)?\) = (\d+)$', line)
    if m and os.path.basename(m.group(3)) == name:
        fd, off, n = int(m.group(2)), int(m.group(4)), int(m.group(5))
        ops.append((direct.get(fd, False), off, n))
total = sum(n for _, _, n in ops)
buf = mmap.mmap(-1, 64 << 20)
buf.write(os.urandom(1 << 20) * 64)
mv = memoryview(buf)
times = []
for _ in range(rounds):
    try:
        os.unlink(img)
    except FileNotFoundError:
        pass
    fd = os.open(img, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, img_len)
    os.system('sync')
    dfd = os.open(img, os.O_RDWR | os.O_DIRECT)
    t = time.time()
    for d, off, n in ops:
        if d and n % 4096 == 0 and off % 4096 == 0 and n <= len(mv):
            k = n // 4096
            for i in range(0, k, 1024):
                j = min(k, i + 1024)
                os.pwritev(dfd, [mv[p * 4096:(p + 1) * 4096] for p in range(i, j)], off + i * 4096)
        else:
            for i in range(0, n, len(mv)):
                os.pwrite(fd, mv[:min(len(mv), n - i)], off + i)
    os.fsync(fd)
    times.append(time.time() - t)
    os.close(dfd)
    os.close(fd)
    os.unlink(img)
builds = [float(x) for x in open(build_txt).read().split()]
floor, build = statistics.median(times), statistics.median(builds)
print(f"{len(ops)} writes, {total / 2**20:.1f} MiB ({sum(1 for d, _, _ in ops if d)} direct)")
print(f"replay of the writes alone: {floor:.3f} s (median of {rounds}; "
      + ", ".join(f"{x:.3f}" for x in times) + ")")
print(f"xfskit build:               {build:.3f} s (median of {len(builds)})")
if files:
    print(f"files/s allowed by the writes alone: {files / floor:,.0f}; "
          f"reached by the build: {files / build:,.0f} ({files} files)")
PY
