#!/usr/bin/env bash
# Fuzz corpus generator: small kernel-made base images and the list of
# one-field corruptions that `xfs_db -x -c 'fuzz -d FIELD VERB'` can make on
# them, in the way of xfstests' fuzz tests (one field of one structure, one
# verb at a time). Deterministic: the same base content, the same targets,
# fields and verbs in the same order (the verb `random` is left out: xfs_db
# seeds it from the clock). The runner is scripts/fuzz_run.sh.
#
# Usage (as root: mkfs.xfs, loop mounts):
#   scripts/fuzz_corpus.sh OUT [FEATURE...]
# FEATURE: default rmap 1k 4ksect pptr metadir (all of them when none is
# given; pptr, the xfsprogs 6.18 defaults with parent pointers, and metadir,
# those with a metadata directory tree, only when xfsprogs 6.15 is beside the
# project at ../shared/xfsprogs-6.15, whose tools then make, fuzz and judge
# their cases).
# Writes OUT/base-FEATURE.img and OUT/cases.tsv, one case a line:
#   feature <TAB> structure <TAB> xfs_db commands (';'-separated) <TAB> field <TAB> verb <TAB> where
# where: the text a check report must contain to name the fuzzed structure.
set -euo pipefail

OUT=${1:?usage: fuzz_corpus.sh OUT [FEATURE...]}
shift
FEATURES=("$@")
SHARED615=$(cd "$(dirname "$0")/.." && pwd)/../shared/xfsprogs-6.15
if [ ${#FEATURES[@]} -eq 0 ]; then
    FEATURES=(default rmap 1k 4ksect)
    [ -x "$SHARED615/libexec/xfs_repair" ] && FEATURES+=(pptr metadir)
fi

# tools_for FEATURE: sets MKFS, XFS_DB and XFS_REPAIR for its images.
tools_for() {
    if [ "$1" = pptr ] || [ "$1" = metadir ]; then
        local e=(env LD_LIBRARY_PATH="$SHARED615/lib")
        MKFS=("${e[@]}" "$SHARED615/libexec/mkfs.xfs")
        XFS_DB=("${e[@]}" "$SHARED615/libexec/xfs_db")
        XFS_REPAIR=("${e[@]}" "$SHARED615/libexec/xfs_repair")
    else
        MKFS=(mkfs.xfs) XFS_DB=(xfs_db) XFS_REPAIR=(xfs_repair)
    fi
}
VERBS=(zeroes ones firstbit middlebit lastbit add sub)
[ "$(id -u)" = 0 ] || { echo "fuzz_corpus.sh: needs root (loop mounts)" >&2; exit 1; }
mkdir -p "$OUT"

mkfs_opts() {
    case $1 in
        default) echo "" ;;
        rmap) echo "-m rmapbt=1,reflink=1" ;;
        1k) echo "-b size=1024 -m rmapbt=1" ;;
        4ksect) echo "-s size=4096" ;;
        pptr) echo "-m rmapbt=1,reflink=1 -i nrext64=1,exchange=1 -n parent=1" ;;
        metadir) echo "-m metadir=1,rmapbt=1,reflink=1 -i nrext64=1,exchange=1 -n parent=1" ;;
        *) echo "unknown feature $1" >&2; exit 2 ;;
    esac
}

# rep CHAR N: CHAR repeated N times
rep() { printf "%${2}s" "" | tr ' ' "$1"; }

# populate DIR: files of every type and fork format
populate() {
    local d=$1 i
    mkdir "$d/sf" "$d/block" "$d/leaf" "$d/node"
    for i in 1 2 3; do touch "$d/sf/f$i"; done
    for i in $(seq 1 40); do touch "$d/block/file_$i"; done
    for i in $(seq 1 400); do touch "$d/leaf/file_number_$i"; done
    for i in $(seq 1 2500); do touch "$d/node/a_longer_file_name_number_$i"; done
    echo hello > "$d/small"
    # file contents from a fixed seed, so every run writes the same bytes
    head -c $((32 << 10)) /dev/zero | tr '\0' 'e' > "$d/extents"
    head -c $((800 << 10)) /dev/zero | tr '\0' 'b' > "$d/btree"
    for i in $(seq 0 2 199); do fallocate -p -o $((i * 4096)) -l 4096 "$d/btree"; done
    ln -s short "$d/symlink_inline"
    ln -s "$(rep x 800)" "$d/symlink_remote"
    touch "$d/attr_local"; setfattr -n user.a -v small "$d/attr_local"
    touch "$d/attr_leaf"
    for i in $(seq 1 30); do setfattr -n "user.attr_$i" -v "$(rep v 60)" "$d/attr_leaf"; done
    touch "$d/attr_node"
    for i in $(seq 1 600); do setfattr -n "user.attribute_name_$i" -v "$(rep v 40)" "$d/attr_node"; done
    touch "$d/attr_remote"; setfattr -n user.big -v "$(rep r 6000)" "$d/attr_remote"
    mknod "$d/chardev" c 1 3
    mkfifo "$d/fifo"
    head -c $((64 << 10)) /dev/zero | tr '\0' 's' > "$d/shared"
    cp --reflink=always "$d/shared" "$d/shared_copy"
}

# make_base FEATURE: OUT/base-FEATURE.img and OUT/base-FEATURE.map (name ino)
make_base() {
    local f=$1 img="$OUT/base-$1.img" mnt
    rm -f "$img"
    truncate -s 40m "$img"
    # mkfs.xfs refuses filesystems under 300 MB unless run by a test suite
    # shellcheck disable=SC2046
    TEST_DEV=1 TEST_DIR=/tmp QA_CHECK_FS=1 "${MKFS[@]}" -q -f $(mkfs_opts "$f") "$img"
    mnt=$(mktemp -d)
    mount -o loop "$img" "$mnt"
    populate "$mnt"
    if [ "$f" = pptr ] || [ "$f" = metadir ]; then
        # parent pointers in leaf blocks: one file with many long names
        touch "$mnt/pptr_leaf"
        for i in $(seq 1 30); do ln "$mnt/pptr_leaf" "$mnt/leaf/$(rep p 80)_$i"; done
    fi
    (cd "$mnt" && ls -i1 | awk '{print $2, $1}') > "$OUT/base-$f.map"
    echo "root $(stat -c %i "$mnt")" >> "$OUT/base-$f.map"
    umount "$mnt"
    rmdir "$mnt"
    "${XFS_REPAIR[@]}" -n "$img" > /dev/null 2>&1 || { echo "base image $img is not clean" >&2; exit 1; }
}

# fields IMG CMDS CORE: the fuzzable fields of the structure the xfs_db
# commands select (';'-separated); of an array, its first and last element.
# CORE=some keeps only the inode core fields that describe the forks (the
# others are fuzzed on a few inodes only).
fields() {
    local img=$1 cmds=$2 args=() c
    IFS=';' read -ra cs <<< "$cmds"
    for c in "${cs[@]}"; do args+=(-c "$c"); done
    "${XFS_DB[@]}" -r "${args[@]}" -c print "$img" 2>/dev/null | awk -v core="$3" '
        function keep(k) {
            if (k ~ /(^|\.)crc$/) return 0
            if (core == "some" && (k ~ /^core\./ || k ~ /^v3\./) &&
                k !~ /^core\.(mode|format|size|nblocks|nextents|naextents|forkoff|aformat|nlinkv2)$/)
                return 0
            return 1
        }
        / = / {
            key = $1
            val = substr($0, index($0, " = ") + 3)
            if (!keep(key)) next
            if (match(key, /\[[0-9]+-[0-9]+\]$/)) {
                # a whole array on one line: name[a-b] = ...
                base = substr(key, 1, RSTART - 1)
                split(substr(key, RSTART + 1, RLENGTH - 2), r, "-")
                n = (r[1] == r[2]) ? 1 : 2
                idx[1] = r[1]; idx[2] = r[2]
                if (val ~ /^\[/) {
                    sub(/^\[/, "", val); sub(/\].*$/, "", val)
                    nf = split(val, names, ",")
                    for (i = 1; i <= n; i++) for (j = 1; j <= nf; j++)
                        out[++no] = base "[" idx[i] "]." names[j]
                } else {
                    for (i = 1; i <= n; i++) out[++no] = base "[" idx[i] "]"
                }
            } else if (match(key, /\[[0-9]+\]/)) {
                # one element a line: name[i].field; keep the first and last i
                norm = substr(key, 1, RSTART) substr(key, RSTART + RLENGTH - 1)
                i = substr(key, RSTART + 1, RLENGTH - 2) + 0
                if (!(norm in lo) || i < lo[norm]) lo[norm] = i
                if (!(norm in hi) || i > hi[norm]) hi[norm] = i
                out[++no] = key; onorm[no] = norm; oi[no] = i
            } else {
                out[++no] = key
            }
        }
        END {
            for (k = 1; k <= no; k++)
                if (!(k in onorm) || oi[k] == lo[onorm[k]] || oi[k] == hi[onorm[k]])
                    print out[k]
        }'
}

# first_bmap IMG INO FORK OFFSET: the first fork offset >= OFFSET that maps a block
first_bmap() {
    "${XFS_DB[@]}" -r -c "inode $2" -c "bmap $3" "$1" 2>/dev/null |
        awk -v o="$4" '{ off = $3 + 0; if (off >= o) { print off; exit } }'
}

# targets FEATURE: "structure<TAB>commands<TAB>where" lines
targets() {
    local f=$1 img="$OUT/base-$1.img" map="$OUT/base-$1.map"
    ino() { awk -v n="$1" '$1 == n {print $2}' "$map"; }
    printf 'sb0\tsb 0\tsuperblock\n'
    printf 'sb1\tsb 1\tAG 1 superblock\n'
    printf 'agf\tagf 0\tAG 0\n'
    printf 'agi\tagi 0\tAG 0\n'
    printf 'agfl\tagfl 0\tAG 0\n'
    printf 'bnobt\tagf 0;addr bnoroot\tAG 0\n'
    printf 'cntbt\tagf 0;addr cntroot\tAG 0\n'
    printf 'inobt\tagi 0;addr root\tAG 0\n'
    printf 'finobt\tagi 0;addr free_root\tAG 0\n'
    printf 'refcountbt\tagf 0;addr refcntroot\tAG 0\n'
    if "${XFS_DB[@]}" -r -c 'sb 0' -c 'print features_ro_compat' "$img" | grep -q '0x[0-9a-f]*[2367abef]$'; then
        printf 'rmapbt\tagf 0;addr rmaproot\tAG 0\n'
    fi
    local n i
    for n in root sf block leaf node small extents btree symlink_inline symlink_remote \
        attr_local attr_leaf attr_node attr_remote chardev fifo shared; do
        i=$(ino "$n")
        printf 'inode:%s\tinode %s\tinode %s\n' "$n" "$i" "$i"
    done
    i=$(ino btree)
    printf 'bmbt-leaf\tinode %s;addr u3.bmbt.ptrs[1]\tinode %s\n' "$i" "$i"
    i=$(ino block)
    printf 'dir-block\tinode %s;dblock 0\tinode %s\n' "$i" "$i"
    i=$(ino leaf)
    printf 'dir-leaf-data\tinode %s;dblock 0\tinode %s\n' "$i" "$i"
    printf 'dir-leaf\tinode %s;dblock %s\tinode %s\n' "$i" "$(first_bmap "$img" "$i" -d $((32 << 30 >> $(blog "$img"))))" "$i"
    i=$(ino node)
    printf 'dir-node\tinode %s;dblock %s\tinode %s\n' "$i" "$(first_bmap "$img" "$i" -d $((32 << 30 >> $(blog "$img"))))" "$i"
    printf 'dir-node-leaf\tinode %s;dblock %s\tinode %s\n' "$i" "$(($(first_bmap "$img" "$i" -d $((32 << 30 >> $(blog "$img")))) + $(dirblks "$img")))" "$i"
    printf 'dir-free\tinode %s;dblock %s\tinode %s\n' "$i" "$(first_bmap "$img" "$i" -d $((64 << 30 >> $(blog "$img"))))" "$i"
    i=$(ino attr_leaf)
    printf 'attr-leaf\tinode %s;ablock 0\tinode %s\n' "$i" "$i"
    i=$(ino attr_node)
    printf 'attr-node\tinode %s;ablock 0\tinode %s\n' "$i" "$i"
    printf 'attr-node-leaf\tinode %s;ablock 1\tinode %s\n' "$i" "$i"
    i=$(ino attr_remote)
    printf 'attr-remote-leaf\tinode %s;ablock 0\tinode %s\n' "$i" "$i"
    printf 'attr-remote\tinode %s;ablock 1\tinode %s\n' "$i" "$i"
    i=$(ino symlink_remote)
    printf 'symlink-remote\tinode %s;dblock 0\tinode %s\n' "$i" "$i"
    if [ "$f" = pptr ]; then
        i=$(ino pptr_leaf)
        printf 'pptr-leaf\tinode %s;ablock 0\tinode %s\n' "$i" "$i"
        printf 'inode:pptr_leaf\tinode %s\tinode %s\n' "$i" "$i"
    fi
    if [ "$f" = metadir ]; then
        # the metadata directory tree: its root and the directory under it
        i=$("${XFS_DB[@]}" -r -c 'sb 0' -c 'print metadirino' "$img" | awk '{print $3}')
        printf 'inode:metadir\tinode %s\tinode %s\n' "$i" "$i"
        i=$("${XFS_DB[@]}" -r -c "inode $i" -c 'print u3.sfdir3.list[0].inumber.i4' "$img" |
            awk '{print $3}')
        printf 'inode:rtgroups\tinode %s\tinode %s\n' "$i" "$i"
    fi
}

blog() { "${XFS_DB[@]}" -r -c 'sb 0' -c 'print blocklog' "$1" | awk '{print $3}'; }
dirblks() { "${XFS_DB[@]}" -r -c 'sb 0' -c 'print dirblklog' "$1" | awk '{print 2 ^ $3}'; }

: > "$OUT/cases.tsv.tmp"
for f in "${FEATURES[@]}"; do
    tools_for "$f"
    make_base "$f"
    targets "$f" | while IFS=$'\t' read -r s cmds where; do
        core=some
        case $s in
            inode:root|inode:extents|inode:symlink_remote|inode:attr_remote) core=all ;;
            inode:metadir|inode:rtgroups) core=all ;;
        esac
        fl=$(fields "$OUT/base-$f.img" "$cmds" "$core")
        [ -n "$fl" ] || { echo "fuzz_corpus.sh: $f $s ($cmds): no fields" >&2; continue; }
        while read -r field; do
            for v in "${VERBS[@]}"; do
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$f" "$s" "$cmds" "$field" "$v" "$where"
            done
        done <<< "$fl"
    done >> "$OUT/cases.tsv.tmp"
done
mv "$OUT/cases.tsv.tmp" "$OUT/cases.tsv"
echo "$(wc -l < "$OUT/cases.tsv") cases in $OUT/cases.tsv"
