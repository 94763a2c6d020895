#!/bin/bash
# Issue 4 benchmark: `xfskit build` against the two other ways to get a
# populated XFS image:
#   proto  mkfs.xfs -p PROTOFILE (protofile generated from the tree; xfsprogs
#          6.1 protofiles carry no xattrs, no hard links (copies instead), and
#          no names with spaces or colons: such entries are left out)
#   kernel mkfs.xfs, loop mount, cp -a, umount (needs root)
# on (a) generated trees of 4 KiB files (100,000 in 100 directories and
# 200,000 in 1,000 directories) and (b) this machine's /usr.
#
# Usage: bench/build.sh [a] [b] [f] [small] [fsmall]
#        (default: a b; f: the features table of issue 49, below; small and
#        fsmall: smoke runs of a and f)
# Env:   XFSKIT   xfskit binary (default target/release/xfskit, built if missing)
#        SCRATCH  work directory (default target/bench-build); needs room for
#                 the trees and one image at a time
#        STRACE=0 skip the write-syscall counts; DROP=0 keep the page cache
#                 (warm runs: the source is read once before timing)
#        BASE     a second xfskit binary (e.g. a baseline build) timed on the
#                 same source right after xfskit, as the row "base"
#        TAR=1    also time xfskit building from a tar of the source (row
#                 "kit-tar"; the tar is made untimed in SCRATCH)
#        AUTO=1   also time xfskit with --size auto (row "auto": the source is
#                 scanned first to size the image; the other xfskit rows get
#                 the size, as mkfs.xfs -p and the kernel do, and scan nothing)
#        ROUNDS   rounds of timed runs (default 1); each figure is the median
# Columns: wall seconds (cold cache when root), entries per second, write
# system calls (strace -f: write, pwrite64, pwritev, pwritev2, and
# copy_file_range, which cp uses instead of write), and time ratio against
# xfskit. Until the write engine exists xfskit build fails; that is printed
# and the other tools still run.
set -uo pipefail
cd "$(dirname "$0")/.."
XFSKIT=${XFSKIT:-$PWD/target/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli || exit 1
SCRATCH=${SCRATCH:-$PWD/target/bench-build}
mkdir -p "$SCRATCH"
IMG=$SCRATCH/image.img
MNT=$SCRATCH/mnt
ROOT=0; [ "$(id -u)" = 0 ] && ROOT=1
command -v strace >/dev/null || STRACE=0
SETS=("$@"); [ ${#SETS[@]} -gt 0 ] || SETS=(a b)
cleanup() { mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"; rm -f "$IMG"; }
trap cleanup EXIT

# make_tree DIR FILES DIRS: FILES files of 4 KiB spread over DIRS directories.
make_tree() {
    local dir=$1 files=$2 dirs=$3
    [ -f "$dir/.done" ] && return
    rm -rf "$dir"; mkdir -p "$dir"
    python3 - "$dir" "$files" "$dirs" <<'PY'
import os, sys
root, files, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = os.urandom(4096)
for d in range(dirs):
    os.mkdir(f"{root}/d{d:04}")
for i in range(files):
    with open(f"{root}/d{i % dirs:04}/f{i:07}", "wb") as f:
        f.write(block)
PY
    touch "$dir/.done"
}

# protofile SRC > PROTO: the tree in mkfs.xfs -p syntax (see mkfs.xfs(8)).
protofile() {
    python3 - "$1" <<'PY'
import os, stat, sys
root = sys.argv[1]
out = sys.stdout
def mode(st):
    m = st.st_mode
    t = {stat.S_IFREG: '-', stat.S_IFDIR: 'd', stat.S_IFLNK: 'l', stat.S_IFBLK: 'b',
         stat.S_IFCHR: 'c', stat.S_IFIFO: 'p'}.get(stat.S_IFMT(m))
    if t is None:
        return None
    return t + ('u' if m & stat.S_ISUID else '-') + ('g' if m & stat.S_ISGID else '-') + '%03o' % (m & 0o777)
def walk(path, depth):
    for name in sorted(os.listdir(path)):
        if any(c in name for c in ' :\t\n$') or not name.isprintable():
            continue
        p = os.path.join(path, name)
        st = os.lstat(p)
        m = mode(st)
        if m is None:
            continue
        head = '%s %s %d %d' % (name, m, st.st_uid, st.st_gid)
        if m[0] == 'd':
            out.write(head + '\n'); walk(p, depth + 1); out.write('$\n')
        elif m[0] == '-':
            out.write('%s %s\n' % (head, p))
        elif m[0] == 'l':
            t = os.readlink(p)
            if ' ' in t or not t:
                continue
            out.write('%s %s\n' % (head, t))
        elif m[0] in 'bc':
            out.write('%s %d %d\n' % (head, os.major(st.st_rdev), os.minor(st.st_rdev)))
        else:
            out.write(head + '\n')
st = os.lstat(root)
out.write('/dev/null\n0 0\n%s %d %d\n' % (mode(st), st.st_uid, st.st_gid))
walk(root, 0)
out.write('$\n')
PY
}

# Every timed run starts with nothing dirty (sync, untimed); cold runs also
# start with an empty page cache.
drop() { sync; [ "${DROP:-1}" = 1 ] && [ $ROOT = 1 ] && echo 3 > /proc/sys/vm/drop_caches; true; }
now() { date +%s.%N; }
# timed LABEL CMD...: runs CMD, sets T; prints the error and sets T=- on failure.
timed() {
    local label=$1; shift
    rm -f "$IMG"  # deleting the last run's image is not part of the work
    drop
    local t0; t0=$(now)
    if "$@" > "$SCRATCH/out.txt" 2>&1; then T=$(echo "$(now) - $t0" | bc)
    else T=-; echo "  $label failed: $(tail -n 3 "$SCRATCH/out.txt" | tr '\n' ' ')"; fi
}
# writes CMD...: counts write system calls of CMD (and its children).
writes() {
    W=-
    [ "${STRACE:-1}" = 0 ] && return
    export -f kit proto kernel
    export IMG SIZE SCRATCH XFSKIT MNT
    strace -f -c -o "$SCRATCH/strace.txt" -e trace=write,pwrite64,pwritev,pwritev2,copy_file_range \
        bash -c '"$@"' _ "$@" >/dev/null 2>&1 || return
    W=$(awk '$NF ~ /^(write|pwrite64|pwritev|pwritev2|copy_file_range)$/ { s += $4 } END { print s + 0 }' "$SCRATCH/strace.txt")
}

kit() { rm -f "$IMG"; "$XFSKIT" build -q "$1" "$IMG" --size "$SIZE" -f; }
base() { rm -f "$IMG"; "$BASE" build -q "$1" "$IMG" --size "$SIZE" -f; }
kitauto() { rm -f "$IMG"; "$XFSKIT" build -q "$1" "$IMG" -f; }
# mkfs.xfs -p needs more room than the kernel for the same tree (it ran out
# of space on /usr in the image the kernel fills fine): give it half again.
proto() { rm -f "$IMG"; truncate -s $((SIZE * 3 / 2)) "$IMG"; mkfs.xfs -q -f -p "$SCRATCH/proto.txt" "$IMG"; }
kernel() {
    rm -f "$IMG"; truncate -s "$SIZE" "$IMG"; mkfs.xfs -q -f "$IMG" || return 1
    mkdir -p "$MNT"; mount -o loop "$IMG" "$MNT" || return 1
    cp -a "$1/." "$MNT/"; local rc=$?
    sync; df -B1M --output=avail "$MNT" | tail -n 1 > "$SCRATCH/free.txt"
    umount "$MNT"; return $rc
}

# med LABEL: the median time of LABEL's runs in times.txt (- if none or any failed).
med() {
    awk -v l="$1" '$1 == l {print $2}' "$SCRATCH/times.txt" | sort -n |
        awk '/^-$/ {bad = 1} {v[NR] = $1} END {if (NR == 0 || bad) print "-"; else print v[int((NR + 1) / 2)]}'
}
rate() { [ "$1" = - ] && { echo -; return; }; echo "scale=0; $N / $1" | bc; }
ratio() { { [ "$1" = - ] || [ "$2" = - ]; } && { echo -; return; }; echo "scale=2; $1 / $2" | bc; }

bench() {
    local name=$1 src=$2
    N=$(find "$src" | wc -l)
    SIZE=$("$XFSKIT" build -N "$src" "$SCRATCH/plan.img" 2>/dev/null | sed -n 's/^image: \([0-9]*\) bytes.*/\1/p')
    [ -n "$SIZE" ] || SIZE=$(( $(du -sb "$src" | cut -f1) * 2 + N * 1024 + (300 << 20) ))
    echo "== $name: $N entries, $(du -sh "$src" | cut -f1), image $((SIZE >> 20)) MiB"
    protofile "$src" > "$SCRATCH/proto.txt"
    [ "${DROP:-1}" = 1 ] || tar -cf - -C "$src" . | cat > /dev/null  # warm the cache
    [ "${TAR:-0}" = 1 ] && tar -cf "$SCRATCH/src.tar" -C "$src" .
    # ROUNDS rounds; in each, every tool runs once (same order), and each
    # figure is the median over the rounds.
    local r; : > "$SCRATCH/times.txt"
    for ((r = 0; r < ${ROUNDS:-1}; r++)); do
        timed xfskit kit "$src"; echo "xfskit $T" >> "$SCRATCH/times.txt"
        [ -n "${BASE:-}" ] && { timed base base "$src"; echo "base $T" >> "$SCRATCH/times.txt"; }
        [ "${AUTO:-0}" = 1 ] && { timed auto kitauto "$src"; echo "auto $T" >> "$SCRATCH/times.txt"; }
        [ "${TAR:-0}" = 1 ] && { timed kit-tar kit "$SCRATCH/src.tar"; echo "kit-tar $T" >> "$SCRATCH/times.txt"; }
        timed proto proto; echo "proto $T" >> "$SCRATCH/times.txt"
        if [ $ROOT = 1 ]; then timed kernel kernel "$src"; echo "kernel $T" >> "$SCRATCH/times.txt"; fi
    done
    rm -f "$SCRATCH/src.tar"
    TK=$(med xfskit); TB=$(med base); TA=$(med auto); TT=$(med kit-tar); TP=$(med proto); TC=$(med kernel)
    [ "$TK" != - ] && { kit "$src" >/dev/null 2>&1; xfs_repair -n "$IMG" >/dev/null 2>&1 && echo "  xfskit image: xfs_repair -n clean" || echo "  xfskit image: xfs_repair -n FOUND PROBLEMS"; }
    WK=-; [ "$TK" != - ] && { writes kit "$src"; WK=$W; }
    writes proto; WP=$W
    WC=-
    if [ $ROOT = 1 ]; then
        [ "$TC" != - ] && { kernel "$src" >/dev/null 2>&1; echo "  kernel copy left $(tr -d ' ' < "$SCRATCH/free.txt") MiB free in the auto-sized image"; }
        writes kernel "$src"; WC=$W
    else echo "  kernel: skipped (needs root for the loop mount)"; fi
    [ "${ROUNDS:-1}" -gt 1 ] && echo "  (median of ${ROUNDS} rounds; all runs: $(tr '\n' ' ' < "$SCRATCH/times.txt"))"
    printf "  %-8s %9s %10s %12s %10s\n" tool seconds entries/s "write calls" "time/xfskit"
    printf "  %-8s %9s %10s %12s %10s\n" xfskit "$TK" "$(rate "$TK")" "$WK" 1
    [ -n "${BASE:-}" ] && printf "  %-8s %9s %10s %12s %10s\n" base "$TB" "$(rate "$TB")" - "$(ratio "$TB" "$TK")"
    [ "${AUTO:-0}" = 1 ] && printf "  %-8s %9s %10s %12s %10s\n" auto "$TA" "$(rate "$TA")" - "$(ratio "$TA" "$TK")"
    [ "${TAR:-0}" = 1 ] && printf "  %-8s %9s %10s %12s %10s\n" kit-tar "$TT" "$(rate "$TT")" - "$(ratio "$TT" "$TK")"
    printf "  %-8s %9s %10s %12s %10s\n" proto "$TP" "$(rate "$TP")" "$WP" "$(ratio "$TP" "$TK")"
    printf "  %-8s %9s %10s %12s %10s\n" kernel "$TC" "$(rate "$TC")" "$WC" "$(ratio "$TC" "$TK")"
}

# Set f (issue 49): what the features of today's defaults cost a build, on
# the 100,000-file tree, warm (the source is read once first), in a 2 GiB
# image for every tool: xfskit at its defaults (xfsprogs 7.2's: rmapbt,
# reflink, parent pointers, exchange-range), without the rmapbt, without
# parent pointers, without both, and at --defaults 6.1, against mkfs.xfs -p
# 6.1 (Debian's, its own defaults) and 7.2 (MKFS72, its defaults). ROUNDS
# rounds (default 3), every row once per round in turn; the figures are the
# median and the range of the rounds. BASE=binary adds that xfskit at the
# defaults and without both (before/after in one run).
MKFS72=${MKFS72:-/work/shared/xfsprogs-7.2/bin/mkfs.xfs}
REPAIR72=${REPAIR72:-$(dirname "$MKFS72")/xfs_repair}
FSIZE=$((2 << 30))
fkit() { rm -f "$IMG"; "$XFSKIT" build -q "$SRC" "$IMG" --size "$FSIZE" -f "$@"; }
fproto() { rm -f "$IMG"; truncate -s "$FSIZE" "$IMG"; "$1" -q -f -p "$SCRATCH/proto.txt" "$IMG"; }
# range LABEL: min-max of LABEL's runs; fmed LABEL: their median (seconds to
# two decimals).
range() { awk -v l="$1" '$1 == l {print $2}' "$SCRATCH/times.txt" | sort -n | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f-%.2f", lo, hi}'; }
fmed() { local m; m=$(med "$1"); [ "$m" = - ] && echo - || printf "%.2f" "$m"; }
features() {
    SRC=$1
    local rounds=${ROUNDS:-3} r row
    local rows=(kit kit-normap kit-nopptr kit-neither kit-6.1 mkfs-6.1 mkfs-7.2)
    [ -n "${BASE:-}" ] && rows+=(base base-neither)
    echo "== features: $(find "$SRC" | wc -l) entries, warm, 2 GiB image, $rounds rounds"
    protofile "$SRC" > "$SCRATCH/proto.txt"
    tar -cf - -C "$SRC" . | cat > /dev/null
    : > "$SCRATCH/times.txt"
    for ((r = 0; r < rounds; r++)); do
        for row in "${rows[@]}"; do
            case $row in
            kit) DROP=0 timed "$row" fkit ;;
            kit-normap) DROP=0 timed "$row" fkit -m rmapbt=0 ;;
            kit-nopptr) DROP=0 timed "$row" fkit -n parent=0 ;;
            kit-neither) DROP=0 timed "$row" fkit -m rmapbt=0 -n parent=0 ;;
            kit-6.1) DROP=0 timed "$row" fkit --defaults 6.1 ;;
            mkfs-6.1) DROP=0 timed "$row" fproto mkfs.xfs ;;
            mkfs-7.2) DROP=0 timed "$row" fproto "$MKFS72" ;;
            base) DROP=0 XFSKIT=$BASE timed "$row" fkit ;;
            base-neither) DROP=0 XFSKIT=$BASE timed "$row" fkit -m rmapbt=0 -n parent=0 ;;
            esac
            echo "$row $T" >> "$SCRATCH/times.txt"
        done
    done
    # Every xfskit image once more, checked by xfs_repair -n 7.2.
    for row in kit kit-normap kit-nopptr kit-neither kit-6.1; do
        case $row in
        kit) fkit ;; kit-normap) fkit -m rmapbt=0 ;; kit-nopptr) fkit -n parent=0 ;;
        kit-neither) fkit -m rmapbt=0 -n parent=0 ;; kit-6.1) fkit --defaults 6.1 ;;
        esac >/dev/null 2>&1
        if "$REPAIR72" -n "$IMG" >/dev/null 2>&1; then echo "  $row image: xfs_repair -n 7.2 clean"
        else echo "  $row image: xfs_repair -n 7.2 FOUND PROBLEMS"; fi
    done
    echo "  all runs: $(tr '\n' ' ' < "$SCRATCH/times.txt")"
    local tk tn t61 tm61 tm72
    tk=$(med kit); tn=$(med kit-neither); t61=$(med kit-6.1); tm61=$(med mkfs-6.1); tm72=$(med mkfs-7.2)
    printf "  %-40s %8s %12s\n" row median range
    printf "  %-40s %8s %12s\n" "xfskit build (7.2 defaults)" "$(fmed kit)" "$(range kit)"
    printf "  %-40s %8s %12s\n" "xfskit build -m rmapbt=0" "$(fmed kit-normap)" "$(range kit-normap)"
    printf "  %-40s %8s %12s\n" "xfskit build -n parent=0" "$(fmed kit-nopptr)" "$(range kit-nopptr)"
    printf "  %-40s %8s %12s\n" "xfskit build -m rmapbt=0 -n parent=0" "$(fmed kit-neither)" "$(range kit-neither)"
    printf "  %-40s %8s %12s\n" "xfskit build --defaults 6.1" "$(fmed kit-6.1)" "$(range kit-6.1)"
    printf "  %-40s %8s %12s\n" "mkfs.xfs 6.1 -p" "$(fmed mkfs-6.1)" "$(range mkfs-6.1)"
    printf "  %-40s %8s %12s\n" "mkfs.xfs 7.2 -p" "$(fmed mkfs-7.2)" "$(range mkfs-7.2)"
    if [ -n "${BASE:-}" ]; then
        printf "  %-40s %8s %12s\n" "BASE build (7.2 defaults)" "$(fmed base)" "$(range base)"
        printf "  %-40s %8s %12s\n" "BASE build -m rmapbt=0 -n parent=0" "$(fmed base-neither)" "$(range base-neither)"
        echo "  BASE at 7.2 defaults / BASE without both: $(ratio "$(med base)" "$(med base-neither)")x; BASE / xfskit: $(ratio "$(med base)" "$tk")x"
    fi
    echo "  7.2 defaults: xfskit / xfskit without rmapbt and parent pointers: $(ratio "$tk" "$tn")x (target: at most 1.1)"
    echo "  7.2 defaults: mkfs.xfs 7.2 -p / xfskit: $(ratio "$tm72" "$tk")x (target: at least 3)"
    echo "  6.1 defaults: mkfs.xfs 6.1 -p / xfskit --defaults 6.1: $(ratio "$tm61" "$t61")x"
}

for s in "${SETS[@]}"; do
    case $s in
    a)
        make_tree "$SCRATCH/t100k" 100000 100
        bench "100,000 x 4 KiB in 100 dirs" "$SCRATCH/t100k"
        make_tree "$SCRATCH/t200k" 200000 1000
        bench "200,000 x 4 KiB in 1,000 dirs" "$SCRATCH/t200k"
        ;;
    b) bench "/usr" /usr ;;
    f)
        make_tree "$SCRATCH/t100k" 100000 100
        features "$SCRATCH/t100k"
        ;;
    fsmall)  # a quick smoke run of set f
        make_tree "$SCRATCH/t2k" 2000 20
        features "$SCRATCH/t2k"
        ;;
    small)  # a quick smoke run of this script
        make_tree "$SCRATCH/t2k" 2000 20
        bench "2,000 x 4 KiB in 20 dirs" "$SCRATCH/t2k"
        ;;
    *) echo "unknown set $s (a, b, f, small or fsmall)"; exit 2 ;;
    esac
done
