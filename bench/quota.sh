#!/bin/bash
# Quotas: what exact accounting costs xfskit's writes, and what turning
# quotas on offline costs against the real tools' pass over the same
# usage.
#
# 1. Writes: the same tree of N files (1-8 KiB, in directories of 500, three
#    owners and groups) copied by `xfskit cp -r` into two fresh mkfs.xfs
#    images, one with quotas on (`xfskit quotacheck`: counts kept exact,
#    three dquot kinds per change), one without. The ratio is the cost of
#    the accounting.
# 2. Quotacheck: `xfskit quotacheck` on an image of M files made by the
#    kernel (loop mount, bench/mkfiles.c), against `xfs_repair -n` 7.2 on
#    the result, which counts every inode into its user, group and project
#    and compares (xfs_repair's quotacheck; the kernel's own, at the first
#    quota mount, needs a kernel with quota support, which this machine's
#    lacks), and against a plain bulkstat.
#
#   N=20000 M=1000000 RUNS=5 bench/quota.sh     (root: loop mounts and chown)
set -euo pipefail
N=${N:-20000}
M=${M:-1000000}
MKFS=${MKFS:-mkfs.xfs}
XFSKIT=${XFSKIT:-target/release/xfskit}
REPAIR=${REPAIR:-../shared/xfsprogs-7.2/bin/xfs_repair}
SCRATCH=${SCRATCH:-$(mktemp -d)}
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }

# 1. Writes with and without quotas.
src=$SCRATCH/src
rm -rf "$src"; mkdir -p "$src"
python3 - "$src" "$N" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%d" % (i // 500))
    if i % 500 == 0:
        os.mkdir(d)
        os.chown(d, 1000 + (i // 500) % 3, 2000 + (i // 500) % 3)
    p = os.path.join(d, "f%d" % i)
    with open(p, "wb") as f:
        f.write(os.urandom(1024 + (i * 7919) % 7168))
    os.chown(p, 1000 + i % 3, 2000 + i % 3)
EOF
# RUNS rounds (default 5), the two alternating, each into a fresh image;
# the medians are printed.
RUNS=${RUNS:-5}
for r in $(seq "$RUNS"); do
    for q in off on; do
        img=$SCRATCH/w-$q.img
        rm -f "$img"; truncate -s 2G "$img"
        $MKFS -q -f "$img" >/dev/null
        [ $q = on ] && "$XFSKIT" quotacheck "$img" >/dev/null
        t "$XFSKIT" cp -r "$src" "$img:/tree" >> "$SCRATCH/times-$q"
    done
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
w_off=$(median "$SCRATCH/times-off")
w_on=$(median "$SCRATCH/times-on")
"$REPAIR" -n "$SCRATCH/w-on.img" >/dev/null 2>&1 && ok=clean || ok="NOT CLEAN"
echo "== cp -r of $N files (three owners), median of $RUNS"
echo "  xfskit, no quotas         $w_off s"
echo "  xfskit, quotas kept exact $w_on s   ($(echo "scale=2; $w_on / $w_off" | bc)x; xfs_repair -n 7.2 after: $ok)"

# 2. Quotacheck at scale.
gcc -O2 -o "$SCRATCH/mkfiles" "$(dirname "$0")/mkfiles.c"
I=$SCRATCH/q.img D=$SCRATCH/m
mkdir -p "$D"
rm -f "$I"; truncate -s 8G "$I"
$MKFS -q -f "$I" >/dev/null
mount -o loop "$I" "$D"
"$SCRATCH/mkfiles" "$D" "$M" $((M / 1000))
chown -R 1000:2000 "$D"/d1* 2>/dev/null || true
umount "$D"
cat "$I" >/dev/null
b=$(t "$XFSKIT" bulkstat "$I")
qc=$(t "$XFSKIT" quotacheck "$I")
r=$(t "$REPAIR" -n "$I")
"$REPAIR" -n "$I" >/dev/null 2>&1 && ok=clean || ok="NOT CLEAN"
echo "== quotas turned on over $M files"
echo "  xfskit bulkstat           $b s"
echo "  xfskit quotacheck         $qc s   ($(echo "scale=2; $qc / $b" | bc)x bulkstat)"
echo "  xfs_repair -n 7.2         $r s   (its pass over the same counts: $(echo "scale=2; $r / $qc" | bc)x xfskit quotacheck; $ok)"
