#!/bin/bash
# xfskit deleted/undelete against a plain bulkstat of the same image, and
# against xfs_undelete (https://github.com/ianka/xfs_undelete, Tcl over
# xfs_db; not packaged: give its path in XFS_UNDELETE to add its rows).
#
# The image: N files of 1-40 KiB in directories of 1,000 (block, leaf and
# node directories), made by the kernel on a loop mount (needs root), one
# file in ten deleted, cleanly unmounted. Every tool reads it warm.
#
#   N=100000 MKFS=mkfs.xfs XFS_UNDELETE=/path/to/xfs_undelete bench/deleted.sh
#
# Prints the seconds of each and the ratios, and how many of the deleted
# files each brings back with their content (xfskit also with the path).
#
# SCALE=1: the scan's cost at scale instead: N empty files (default
# 1,000,000) in directories of 1,000, made by bench/mkfiles.c, one in ten
# deleted by the kernel (find -delete), cleanly unmounted; times bulkstat,
# deleted (with and without --quick), timeline and timeline --deleted, and
# counts the deleted files named under their full path.
#
#   SCALE=1 N=1000000 bench/deleted.sh
set -euo pipefail
if [ "${SCALE:-0}" = 1 ]; then N=${N:-1000000}; else N=${N:-20000}; fi
MKFS=${MKFS:-mkfs.xfs}
XFSKIT=${XFSKIT:-target/release/xfskit}
SCRATCH=${SCRATCH:-$(mktemp -d)}
I=$SCRATCH/del.img M=$SCRATCH/m
mkdir -p "$M"
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
if [ "${SCALE:-0}" = 1 ]; then
    gcc -O2 -o "$SCRATCH/mkfiles" "$(dirname "$0")/mkfiles.c"
    rm -f "$I"; truncate -s 8G "$I"
    $MKFS -q -f "$I" >/dev/null
    mount -o loop "$I" "$M"
    "$SCRATCH/mkfiles" "$M" "$N" $((N / 1000))
    umount "$M"; mount -o loop "$I" "$M"
    gone=$(cd "$M" && find . -type f -name 'f*0' | wc -l)
    find "$M" -type f -name 'f*0' -delete
    umount "$M"
    echo "== $N files, $gone deleted, $MKFS"
    cat "$I" >/dev/null
    b=$(t "$XFSKIT" bulkstat "$I")
    d=$(t "$XFSKIT" deleted --json -q "$I")
    q=$(t "$XFSKIT" deleted --json -q --quick "$I")
    tl=$(t "$XFSKIT" timeline "$I")
    td=$(t "$XFSKIT" timeline --deleted "$I")
    named=$("$XFSKIT" deleted --json -q --quick "$I" | python3 -c '
import json, re, sys
r = json.load(sys.stdin)
print(sum(1 for x in r if x["path"] and re.fullmatch(r"/d\d+/f\d*0", x["path"])))')
    echo "  xfskit bulkstat            $b s"
    echo "  xfskit deleted             $d s   ($(echo "scale=2; $d / $b" | bc)x bulkstat)"
    echo "  xfskit deleted --quick     $q s   ($(echo "scale=2; $q / $b" | bc)x bulkstat)"
    echo "  xfskit timeline            $tl s   ($(echo "scale=2; $tl / $b" | bc)x bulkstat)"
    echo "  xfskit timeline --deleted  $td s   ($(echo "scale=2; $td / $b" | bc)x bulkstat)"
    echo "  named under their full path: $named of $gone"
    exit 0
fi
rm -f "$I"; truncate -s $((N / 1000 * 64 + 512))M "$I"
$MKFS -q -f "$I" >/dev/null
mount -o loop "$I" "$M"
for d in $(seq 1 $((N / 1000))); do
    mkdir "$M/d$d"
    for i in $(seq 1 1000); do head -c $(((i % 40 + 1) * 1024)) /dev/urandom >"$M/d$d/f_$i"; done
done
umount "$M"; mount -o loop "$I" "$M"
(cd "$M" && find . -type f -name 'f_*0' | sort) >"$SCRATCH/list"
while read -r f; do echo "$(stat -c '%i %s' "$M/$f") $(sha256sum <"$M/$f" | cut -d' ' -f1) ${f#.}"; done <"$SCRATCH/list" >"$SCRATCH/manifest"
xargs -a "$SCRATCH/list" -d '\n' -I{} rm "$M/{}"
umount "$M"
echo "== $N files, $(wc -l <"$SCRATCH/manifest") deleted, $MKFS"
cat "$I" >/dev/null
b=$(t "$XFSKIT" bulkstat "$I")
d=$(t "$XFSKIT" deleted --json -q "$I")
q=$(t "$XFSKIT" deleted --json -q --quick "$I")
rm -rf "$SCRATCH/kit"; u=$(t "$XFSKIT" undelete -q "$I" "$SCRATCH/kit")
echo "  xfskit bulkstat            $b s"
echo "  xfskit deleted             $d s   ($(echo "scale=2; $d / $b" | bc)x bulkstat)"
echo "  xfskit deleted --quick     $q s   ($(echo "scale=2; $q / $b" | bc)x bulkstat)"
echo "  xfskit undelete            $u s"
score() {
    python3 - "$SCRATCH/manifest" "$@" <<'EOF'
import sys, os, json, hashlib
man, kind, out = sys.argv[1:4]
files = {}
if kind == "kit":
    for l in open(os.path.join(out, "deleted.jsonl")):
        r = json.loads(l)
        if r.get("recovered_to"):
            files[r["inode"]] = (os.path.join(out, r["recovered_to"]), r.get("path"))
else:
    for f in os.listdir(out):
        files[int(f.rsplit("_", 1)[1].split(".")[0])] = (os.path.join(out, f), None)
n = data = path = 0
for l in open(man):
    ino, size, sha, p = l.split(); ino, size = int(ino), int(size); n += 1
    f = files.get(ino)
    if not f: continue
    b = open(f[0], "rb").read()
    if len(b) >= size and hashlib.sha256(b[:size]).hexdigest() == sha and not any(b[size:]):
        data += 1; path += f[1] == p
print(f"{data} of {n} with their content" + (f", {path} under their full path" if kind == "kit" else ""))
EOF
}
echo "  xfskit undelete recovers   $(score kit "$SCRATCH/kit")"
if [ -n "${XFS_UNDELETE:-}" ]; then
    rm -rf "$SCRATCH/xu"
    x=$(t "$XFS_UNDELETE" --no-remount-readonly -i "" -z "" -o "$SCRATCH/xu" "$I")
    echo "  xfs_undelete               $x s   (xfskit undelete is $(echo "scale=1; $x / $u" | bc)x faster)"
    echo "  xfs_undelete recovers      $(score xu "$SCRATCH/xu")"
fi
