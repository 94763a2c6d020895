#!/usr/bin/env bash
# Build the golden fixture images in testdata/fixtures/ with the real mkfs.xfs
# and the Linux kernel. Needs root (loop mounts, mknod, chown, trusted. xattrs).
#
# Usage: sudo testdata/make-fixtures.sh [NAME...]   (default: every fixture)
#
# For each fixture: make a 300 MiB sparse image, mkfs.xfs with the fixture's
# options and a fixed UUID, loop mount it, fill it with testdata/populate.py,
# record the inode numbers of interesting paths, unmount, require a clean
# `xfs_repair -n`, record on-disk formats with xfs_db (NAME.formats.txt), and
# compress to NAME.img.zst. Rerunning overwrites the outputs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
out="$here/fixtures"
work="$(mktemp -d /tmp/xfskit-fixtures.XXXXXX)"
mnt="$work/mnt"
mkdir -p "$out" "$mnt"

cleanup() {
    if mountpoint -q "$mnt"; then umount "$mnt"; fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
    echo "make-fixtures.sh: must run as root" >&2
    exit 1
fi

# name | level | uuid | mkfs options
FIXTURES=(
    "a_default|full|0a0a0a0a-0000-4000-8000-00000000000a|"
    "b_1k_plain|full|0b0b0b0b-0000-4000-8000-00000000000b|-b size=1024 -m reflink=0,rmapbt=0 -i sparse=0"
    "c_64k|medium|0c0c0c0c-0000-4000-8000-00000000000c|-b size=65536 -n size=65536"
    "d_sect4k_ino2k|medium|0d0d0d0d-0000-4000-8000-00000000000d|-s size=4096 -i size=2048 -n size=16384"
    "e_nrext64|medium|0e0e0e0e-0000-4000-8000-00000000000e|-i nrext64=1 -m inobtcount=1,bigtime=1"
    "f_nofinobt_ino1k|medium|0f0f0f0f-0000-4000-8000-00000000000f|-m finobt=0 -i size=1024"
)

# Paths whose on-disk format is recorded in NAME.formats.txt.
PROBES=(
    dirs/shortform dirs/block dirs/leaf dirs/node_small dirs/node dirs/btree
    files/empty files/one_extent files/dozens_extents files/many_extents
    files/sparse files/falloc_only files/falloc_partial
    xattrs/shortform xattrs/leaf xattrs/node xattrs/remote
    links/short_symlink links/long_symlink links/max_symlink
)

# Print "format nextents" etc. for one inode, from xfs_db.
probe_inode() {
    local img="$1" ino="$2"
    xfs_db -r -c "inode $ino" -c "print core.mode core.format core.nextents core.aformat core.naextents core.size" "$img" |
        sed 's/^core\.//' | tr '\n' ' '
}

# Classify a directory stored in extents/btree format by where its blocks sit
# and which magic numbers they carry. Offsets are in filesystem blocks; leaf
# space starts at 32 GiB of the directory's address space, free-index at 64 GiB.
dir_kind() {
    local img="$1" ino="$2" bsize="$3"
    local leaf_off=$(( (32 << 30) / bsize )) free_off=$(( (64 << 30) / bsize ))
    local has_leaf=0 has_free=0 off
    while read -r off; do
        if [ "$off" -ge "$free_off" ]; then has_free=1
        elif [ "$off" -ge "$leaf_off" ]; then has_leaf=1; fi
    done < <(xfs_db -r -c "inode $ino" -c "bmap" "$img" | sed -n 's/^data offset \([0-9]*\) .*/\1/p')
    if [ "$has_free" = 1 ]; then
        echo "node (leaf-space $(block_magic "$img" "$ino" "$leaf_off"), free-space $(block_magic "$img" "$ino" "$free_off"))"
    elif [ "$has_leaf" = 1 ]; then
        echo "leaf (leaf-space $(block_magic "$img" "$ino" "$leaf_off"), block 0 $(block_magic "$img" "$ino" 0))"
    else
        echo "block (block 0 $(block_magic "$img" "$ino" 0))"
    fi
}

# The magic field of a directory block at a given offset, as xfs_db prints it.
block_magic() {
    xfs_db -r -c "inode $2" -c "dblock $3" -c "print" "$1" 2>&1 | grep -m1 'magic' | tr -d ' '
}

# Depth of the data fork bmbt: the level stored in the inode root, plus one.
bmbt_levels() {
    local img="$1" ino="$2"
    xfs_db -r -c "inode $ino" -c "print u3.bmbt.level" "$img" 2>/dev/null | sed -n 's/.*level = //p'
}

attr_kind() {
    local img="$1" ino="$2"
    xfs_db -r -c "inode $ino" -c "ablock 0" -c "print hdr.info.hdr.magic" "$img" 2>&1 | tr '\n' ' '
}

build_one() {
    local spec="$1"
    local name level uuid opts
    IFS='|' read -r name level uuid opts <<<"$spec"
    local img="$work/$name.img"
    echo "== $name ($level): mkfs.xfs $opts"
    rm -f "$img"
    truncate -s 300m "$img"
    # shellcheck disable=SC2086
    mkfs.xfs -q -f -m uuid="$uuid" $opts "$img"
    local info bsize bigtime
    info="$(xfs_db -r -c info "$img" 2>/dev/null || xfs_info "$img")"
    bsize="$(echo "$info" | sed -n 's/^data *= *bsize=\([0-9]*\).*/\1/p')"
    bigtime=0
    if echo "$info" | grep -q 'bigtime=1'; then bigtime=1; fi

    mount -o loop "$img" "$mnt"
    python3 "$here/populate.py" "$mnt" "$level" "$bsize" "$bigtime" >"$out/$name.counts"
    local inos="$work/$name.inos"
    : >"$inos"
    for p in "${PROBES[@]}"; do
        if [ -e "$mnt/$p" ] || [ -L "$mnt/$p" ]; then
            echo "$(stat -c %i "$mnt/$p") $p" >>"$inos"
        fi
    done
    umount "$mnt"

    if ! xfs_repair -n "$img" >"$work/$name.repair" 2>&1; then
        cat "$work/$name.repair" >&2
        echo "xfs_repair -n reported problems in $name" >&2
        exit 1
    fi

    {
        echo "# $name: mkfs.xfs $opts (level $level, bsize $bsize, bigtime $bigtime)"
        echo "$info" | sed 's/^/# /'
        while read -r ino p; do
            local line extra=""
            line="$(probe_inode "$img" "$ino")"
            case "$p" in
                dirs/*)
                    case "$line" in
                        *"format = 1 "*) extra="shortform" ;;
                        *"format = 3 "*) extra="btree-format, $(dir_kind "$img" "$ino" "$bsize") bmbt root level $(bmbt_levels "$img" "$ino")" ;;
                        *) extra="$(dir_kind "$img" "$ino" "$bsize")" ;;
                    esac ;;
                files/*)
                    case "$line" in
                        *"format = 3 "*) extra="bmbt root level $(bmbt_levels "$img" "$ino") (depth = level + 1)" ;;
                    esac ;;
                xattrs/*)
                    case "$line" in
                        *"aformat = 1 "*) extra="attr shortform" ;;
                        *) extra="attr $(attr_kind "$img" "$ino")" ;;
                    esac ;;
            esac
            echo "$p ino=$ino $line| $extra"
        done <"$inos"
    } >"$out/$name.formats.txt"

    rm -f "$out/$name.img.zst"
    zstd -q -19 --long=27 "$img" -o "$out/$name.img.zst"
    rm -f "$img"
    ls -l "$out/$name.img.zst"
}

want=("$@")
for spec in "${FIXTURES[@]}"; do
    n="${spec%%|*}"
    if [ "${#want[@]}" -gt 0 ] && [[ ! " ${want[*]} " == *" $n "* ]]; then continue; fi
    build_one "$spec"
done
echo "done: $out"
