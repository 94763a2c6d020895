#!/bin/bash
# Python readers side by side: walk + stat + read + sha256 of every file of
# an image holding a copy of /usr/share/doc (a 1 GiB image made by mkfs.xfs
# with Debian's 6.1 defaults and filled through a kernel loop mount), with
#   xfskit    this package (pip install ./python, release build), os.scandir-style
#   xfskit-paths  the same package, os.walk-style (a path lookup per lstat and read)
#   dissect   dissect.xfs (PyPI, pure Python)
#   pyfsxfs   libfsxfs-python (PyPI, libyal's C library)
# and `xfskit extract` to a directory in /dev/shm (the CLI, no Python),
# whose tree is then walked and hashed the same way ("extract+hash").
# Each tool runs RUNS times on a page-cached image; the best time is kept.
# Every tool's digest over (path, sha256) pairs must agree.
#
# Usage: bench/python.sh   (as root: the loop mount)
# Env:   RUNS (default 3), SRC (default /usr/share/doc), SIZE (default 1G),
#        VENV (default: a fresh one in the work directory)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SRC=${SRC:-/usr/share/doc}
SIZE=${SIZE:-1G}
[ "$(id -u)" = 0 ] || { echo "bench/python.sh: run as root (loop mount)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/pybench.XXXXXX")
OUT=$(mktemp -d /dev/shm/pybench.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
cleanup() { mountpoint -q "$MNT" && umount -l "$MNT"; rm -rf "$WORK" "$OUT"; }
trap cleanup EXIT

VENV=${VENV:-$WORK/venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q maturin dissect.xfs libfsxfs-python
  "$VENV/bin/pip" install -q ./python
fi
[ -x target/release/xfskit ] || cargo build --release -q -p xfskit-cli

IMG=$WORK/img
truncate -s "$SIZE" "$IMG"
mkfs.xfs -q "$IMG"
mount -o loop "$IMG" "$MNT"
cp -a "$SRC"/. "$MNT"/
umount "$MNT"
cat "$IMG" > /dev/null   # page-cached: the readers' own cost is compared
echo "image: $SIZE, $(find "$SRC" -type f | wc -l) files, $(du -sh "$SRC" | cut -f1) from $SRC"

best() { # tool arg -> the fastest run's JSON line
  local tool=$1 arg=$2 line best_line="" best_s=""
  for _ in $(seq "$RUNS"); do
    line=$("$VENV/bin/python" bench/python_bench.py "$tool" "$arg")
    s=$(echo "$line" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
    if [ -z "$best_s" ] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s; best_line=$line; fi
  done
  echo "$best_line"
}

results=()
for t in xfskit xfskit-paths dissect pyfsxfs; do
  results+=("$(best "$t" "$IMG")")
done
# xfskit extract, then the same hash pass over the extracted tree.
ex_best=""
for _ in $(seq "$RUNS"); do
  rm -rf "$OUT/tree"
  s0=$(date +%s.%N)
  target/release/xfskit extract "$IMG" "$OUT/tree" >/dev/null 2>&1
  s1=$(date +%s.%N)
  e=$(awk "BEGIN{print $s1 - $s0}")
  if [ -z "$ex_best" ] || awk "BEGIN{exit !($e < $ex_best)}"; then ex_best=$e; fi
done
tree=$(best tree "$OUT/tree")
results+=("$(echo "$tree" | "$VENV/bin/python" -c '
import json, sys
j = json.load(sys.stdin)
j["tool"] = "extract+hash"; j["extract_seconds"] = round(float(sys.argv[1]), 3)
j["seconds"] = round(j["seconds"] + float(sys.argv[1]), 3)
print(json.dumps(j))' "$ex_best")")

printf '%s\n' "${results[@]}" | "$VENV/bin/python" bench/python_bench.py summary -
