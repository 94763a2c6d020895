#!/bin/bash
# Fleet inventory: N images of about INODES inodes each (made by
# `xfskit build` from one generated tree), inventoried (every path with its
# bulkstat fields and xattr names, Parquet) by
#   ray1, ray2     python -m xfskit.fleet's inventory() on a local Ray
#                  instance of 1 and 2 CPUs (ray.init timed apart)
#   local2         the same on the process pool (--local), 2 processes
#   loop           the same per-image work in a plain Python loop, one process
#   oswalk         a Python loop written as for `os`: fs.walk, fs.lstat and
#                  fs.listxattr per path (the package, no fleet)
#   kernel1/2      the kernel: mount -o loop,ro, `find -printf` of path,
#                  inode, mode, links, owners, size, mtime, umount; one image
#                  at a time and two at once (xargs -P 2). It lists no xattr
#                  names (getfattr per file would add a process per file).
# Images are page-cached (read once before); RUNS rounds run every way once
# in turn, the best run of each kept. Every way must count the same rows (paths).
#
# Usage: bench/fleet.sh   (as root: the loop mounts)
# Env:   N (default 40), INODES (default 20000), RUNS (default 3),
#        VENV (a venv with xfskit[fleet]; default: a fresh one here, pip
#        install "./python[fleet]", a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-40}
INODES=${INODES:-20000}
RUNS=${RUNS:-3}
[ "$(id -u)" = 0 ] || { echo "bench/fleet.sh: run as root (loop mounts)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/fleetbench.XXXXXX")
cleanup() {
  for m in "$WORK"/mnt*; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
  rm -rf "$WORK"
}
trap cleanup EXIT

VENV=${VENV:-$WORK/venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q maturin
  "$VENV/bin/pip" install -q "./python[fleet]"
fi
PY=$VENV/bin/python

# One tree: INODES entries, 100 files a directory, one file in four with
# 700 bytes (the rest empty), a user xattr on one file in fifty.
"$PY" - "$WORK/src" "$INODES" <<'PYEOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
made = 1
d = 0
while made < n:
    dp = os.path.join(root, f"d{d:04d}")
    os.makedirs(dp)
    made += 1
    for j in range(min(100, n - made)):
        p = os.path.join(dp, f"file-{j:03d}")
        with open(p, "wb") as f:
            if j % 4 == 0:
                f.write(os.urandom(700))
        if j % 50 == 0:
            os.setxattr(p, "user.bench", b"1")
        made += 1
    d += 1
PYEOF
: > "$WORK/list"
for i in $(seq -w 1 "$N"); do
  "$PY" -c 'import sys, xfskit; xfskit.build(sys.argv[1], sys.argv[2])' "$WORK/src" "$WORK/img$i.img"
  echo "$WORK/img$i.img" >> "$WORK/list"
done
cat "$WORK"/img*.img > /dev/null
echo "images: $N made by xfskit build, $INODES inodes each ($(du -sch "$WORK"/img*.img | tail -1 | cut -f1) allocated)"

kernel_one() { # image -> rows printed by find
  local img=$1 m
  m=$WORK/mnt.$(basename "$img")
  mkdir -p "$m"
  mount -o loop,ro "$img" "$m"
  find "$m" -printf '%p\t%i\t%m\t%n\t%U\t%G\t%s\t%T@\n' > "$WORK/k.$(basename "$img").tsv"
  umount "$m"
}
export -f kernel_one
export WORK

one() { # way -> one timed run's JSON line
  local way=$1 s0 s1 rows
  case $way in
    kernel*)
      rm -f "$WORK"/k.*.tsv
      s0=$(date +%s.%N)
      xargs -P "${way#kernel}" -I{} bash -c 'kernel_one "$1"' _ {} < "$WORK/list"
      s1=$(date +%s.%N)
      rows=$(cat "$WORK"/k.*.tsv | wc -l)
      echo "{\"how\": \"$way\", \"seconds\": $(awk "BEGIN{printf \"%.3f\", $s1 - $s0}"), \"rows\": $rows, \"ok\": true}"
      ;;
    *) (cd "$WORK" && "$PY" "$OLDPWD/bench/fleet_bench.py" "$way" "$WORK/list" "$WORK/out") ;;
  esac
}

# Rounds: every way once per round, in turn, so that load from elsewhere
# falls on all of them; the best run of each way is kept.
WAYS=(ray2 ray1 local2 loop oswalk kernel1 kernel2)
: > "$WORK/runs"
for r in $(seq "$RUNS"); do
  for way in "${WAYS[@]}"; do
    line=$(one "$way")
    echo "round $r: $line" >&2
    echo "$line" >> "$WORK/runs"
  done
done
results=()
for way in "${WAYS[@]}"; do
  results+=("$("$PY" -c '
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["how"] == sys.argv[2]]
print(json.dumps(min(runs, key=lambda r: r["seconds"])))' "$WORK/runs" "$way")")
done
printf '%s\n' "${results[@]}" | "$PY" bench/fleet_bench.py summary -
