#!/usr/bin/env python3
"""Fill a freshly mounted XFS filesystem with the xfskit fixture content.

Usage: populate.py MOUNTPOINT LEVEL BLOCKSIZE BIGTIME

LEVEL is "full" or "medium". BLOCKSIZE is the filesystem block size in bytes.
BIGTIME is 1 when the filesystem can store timestamps after 2038.

Everything written is derived from fixed seeds so that reruns produce the same
names, contents, modes, owners and timestamps (inode numbers and ctimes still
depend on the kernel). On success a summary of what was made is printed as
"kind count" lines on stdout; make-fixtures.sh stores it as NAME.counts.
"""

import os
import random
import socket
import stat
import subprocess
import sys

# 2020-01-01T00:00:00Z, used for every timestamp that is not deliberately odd.
BASE_NS = 1577836800 * 10**9
# 1960-01-01T00:00:00.123456789Z
PRE_EPOCH_NS = -315619200 * 10**9 + 123456789
# 2100-06-01T00:00:00.987654321Z
POST_2038_NS = 4115318400 * 10**9 + 987654321

# Paths whose timestamps must not be reset by the final pass.
KEEP_TIMES = set()


def rng(seed):
    return random.Random(seed)


def content(seed, n):
    """Deterministic pseudo-random bytes."""
    return rng(seed).randbytes(n)


def write_file(path, data, mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def long_name(r, i, width):
    """A name of at least `width` characters, unique per i."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_-"
    tail = "".join(r.choice(alphabet) for _ in range(width))
    return f"n{i:06d}_{tail}"


def make_dir_with(path, count, width, seed):
    os.mkdir(path)
    r = rng(seed)
    for i in range(count):
        name = long_name(r, i, width) if width else f"e{i}"
        open(os.path.join(path, name), "wb").close()


def make_dirs(root, level, bsize):
    d = os.path.join(root, "dirs")
    os.mkdir(d)
    make_dir_with(os.path.join(d, "shortform"), 3, 0, 1)
    make_dir_with(os.path.join(d, "block"), 50, 0, 2)
    make_dir_with(os.path.join(d, "leaf"), 500, 0, 3)
    # The node directory's entries are made elsewhere and renamed in, so no
    # inode chunk allocations land between its blocks and it keeps few extents.
    # 64 KiB directory blocks hold about 8000 leaf entries: use more names there.
    pool = os.path.join(d, "pool")
    make_dir_with(pool, 12000 if bsize >= 65536 else 5000, 24, 4)
    node = os.path.join(d, "node")
    os.mkdir(node)
    for n in sorted(os.listdir(pool)):
        os.rename(os.path.join(pool, n), os.path.join(node, n))
    os.rmdir(pool)
    # Just past the leaf-format limit with short names: a node directory whose
    # few extents still fit in the inode (extents format, not btree).
    make_dir_with(os.path.join(d, "node_small"), 1200, 0, 6)
    if level == "full":
        make_btree_dir(os.path.join(d, "btree"), bsize)


def make_btree_dir(path, bsize):
    """A directory whose data fork needs a bmbt.

    Each entry is a file with one block of data that is allocated at once
    (fallocate), so the file blocks interleave with the directory's own blocks
    and the directory ends up with many separate extents.
    """
    os.mkdir(path)
    r = rng(5)
    for i in range(3000):
        p = os.path.join(path, long_name(r, i, 60))
        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, bsize)
            os.pwrite(fd, bytes([i % 251]) * 64, 0)
        finally:
            os.close(fd)


def make_files(root, level, bsize):
    d = os.path.join(root, "files")
    os.mkdir(d)
    write_file(os.path.join(d, "empty"), b"")
    write_file(os.path.join(d, "small"), b"hello, xfs\n")
    write_file(os.path.join(d, "one_extent"), content(10, 3 * bsize + 123))
    # Dozens of extents: one block written every other block.
    frag(os.path.join(d, "dozens_extents"), 40, bsize)
    many = 8000 if level == "full" else 1000
    if bsize >= 65536:
        many = 300
    frag(os.path.join(d, "many_extents"), many, bsize)
    # Sparse file: data islands and a trailing hole.
    p = os.path.join(d, "sparse")
    with open(p, "wb") as f:
        f.write(content(11, 5000))
        f.seek(1 << 20)
        f.write(content(12, 7000))
        f.seek(10 << 20)
        f.write(b"island")
        f.truncate(100 << 20)
    # Unwritten extents: wholly fallocated, and fallocated around written data.
    subprocess.run(["fallocate", "-l", "2m", os.path.join(d, "falloc_only")], check=True)
    p = os.path.join(d, "falloc_partial")
    with open(p, "wb") as f:
        f.write(content(13, 64 * 1024))
        f.flush()
        os.fsync(f.fileno())
    subprocess.run(["xfs_io", "-c", "falloc 0 1m", p], check=True)


def frag(path, extents, bsize):
    """Write one block every other block, last block first (no EOF growth)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in reversed(range(extents)):
            os.pwrite(fd, bytes([i % 251]) * bsize, 2 * i * bsize)
    finally:
        os.close(fd)


def make_xattrs(root, level):
    d = os.path.join(root, "xattrs")
    os.mkdir(d)

    def setx(path, pairs):
        for name, value in pairs:
            os.setxattr(path, name, value, follow_symlinks=False)

    p = os.path.join(d, "shortform")
    write_file(p, b"sf\n")
    setx(p, [("user.a", b"1"), ("trusted.b", b"two"), ("security.c", b"three")])
    p = os.path.join(d, "leaf")
    write_file(p, b"leaf\n")
    setx(p, [(f"user.attr{i:03d}", f"value-{i}".encode()) for i in range(30)])
    p = os.path.join(d, "node")
    write_file(p, b"node\n")
    # Enough to need a dabtree even with 64 KiB blocks, while the name list
    # stays under the kernel's 64 KiB listxattr limit.
    setx(p, [(f"user.k{i:05d}", f"v{i}".encode()) for i in range(4500)])
    # Remote values: the kernel limits one value to 64 KiB.
    p = os.path.join(d, "remote")
    write_file(p, b"remote\n")
    setx(p, [
        ("user.r4k", content(20, 4096 + 17)),
        ("trusted.r64k", content(21, 65536)),
        ("security.small", b"s"),
        ("user.empty", b""),
    ])
    # Xattrs on a directory and a symlink.
    os.mkdir(os.path.join(d, "dir_with_attrs"))
    setx(os.path.join(d, "dir_with_attrs"), [("user.on_dir", b"yes")])
    os.symlink("shortform", os.path.join(d, "link_with_attrs"))
    setx(os.path.join(d, "link_with_attrs"), [("trusted.on_link", b"yes")])


def make_links(root):
    d = os.path.join(root, "links")
    os.mkdir(d)
    os.symlink("short", os.path.join(d, "short_symlink"))
    r = rng(30)
    target = "/".join("".join(r.choice("abcdefgh") for _ in range(9)) for _ in range(100))
    os.symlink(target[:1000], os.path.join(d, "long_symlink"))
    # The longest target XFS accepts: 1023 bytes (1024 is refused).
    os.symlink((("x" * 63 + "/") * 16)[:1023], os.path.join(d, "max_symlink"))
    for sub in ("h1", "h2", "h3"):
        os.mkdir(os.path.join(d, sub))
    first = os.path.join(d, "h1", "hard")
    write_file(first, content(31, 3000))
    os.link(first, os.path.join(d, "h2", "hard_b"))
    os.link(first, os.path.join(d, "h3", "hard_c"))


def make_specials(root):
    d = os.path.join(root, "special")
    os.mkdir(d)
    os.mknod(os.path.join(d, "null_chr"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(os.path.join(d, "big_chr"), stat.S_IFCHR | 0o600, os.makedev(300, 70000))
    os.mknod(os.path.join(d, "loop_blk"), stat.S_IFBLK | 0o660, os.makedev(7, 0))
    os.mkfifo(os.path.join(d, "fifo"), 0o644)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(d, "socket"))
    s.close()


def make_modes(root):
    d = os.path.join(root, "modes")
    os.mkdir(d)
    specs = [
        ("suid", 0o4755, 0, 0),
        ("sgid", 0o2755, 1000, 1000),
        ("none", 0o0000, 65534, 65534),
        ("all", 0o0777, 4000000000, 4000000000),
        ("mixed_owner", 0o0640, 1000, 65534),
    ]
    for name, mode, uid, gid in specs:
        p = os.path.join(d, name)
        write_file(p, name.encode())
        os.chown(p, uid, gid)
        os.chmod(p, mode)
    sticky = os.path.join(d, "sticky_dir")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    os.chown(sticky, 1000, 1000)


def make_names(root):
    d = os.path.join(root, "names")
    os.mkdir(d)
    names = [
        "with space",
        " leading and trailing ",
        "ünïcødé-名前-🙂",
        "odd!@#$%^&()[]{};',=+~`",
        "-dash",
        ".hidden",
        "a" * 255,
        "é" * 127 + "z",  # 255 bytes of UTF-8
    ]
    for i, n in enumerate(names):
        write_file(os.path.join(d, n), f"{i}\n".encode())


def make_times(root, bigtime):
    d = os.path.join(root, "times")
    os.mkdir(d)
    p = os.path.join(d, "pre_1970")
    write_file(p, b"old\n")
    os.utime(p, ns=(PRE_EPOCH_NS, PRE_EPOCH_NS))
    KEEP_TIMES.add(p)
    p = os.path.join(d, "epoch")
    write_file(p, b"epoch\n")
    os.utime(p, ns=(0, 0))
    KEEP_TIMES.add(p)
    p = os.path.join(d, "with_nsec")
    write_file(p, b"nsec\n")
    os.utime(p, ns=(BASE_NS + 999999999, BASE_NS + 1))
    KEEP_TIMES.add(p)
    if bigtime:
        p = os.path.join(d, "after_2038")
        write_file(p, b"future\n")
        os.utime(p, ns=(POST_2038_NS, POST_2038_NS))
        KEEP_TIMES.add(p)


def settle_times(root):
    """Give every path a fixed timestamp, children before their directory."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            p = os.path.join(dirpath, n)
            if p in KEEP_TIMES or os.path.isdir(p) and not os.path.islink(p):
                continue
            os.utime(p, ns=(BASE_NS, BASE_NS), follow_symlinks=False)
        os.utime(dirpath, ns=(BASE_NS, BASE_NS))


def count_kinds(root):
    counts = {k: 0 for k in ("file", "dir", "symlink", "chardev", "blockdev", "fifo", "socket")}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            m = os.lstat(os.path.join(dirpath, n)).st_mode
            kind = {
                stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink",
                stat.S_IFCHR: "chardev", stat.S_IFBLK: "blockdev", stat.S_IFIFO: "fifo",
                stat.S_IFSOCK: "socket",
            }[stat.S_IFMT(m)]
            counts[kind] += 1
    counts["dir"] += 1  # the root itself
    return counts


def main():
    root, level, bsize, bigtime = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    assert level in ("full", "medium")
    os.umask(0o022)
    make_dirs(root, level, bsize)
    make_files(root, level, bsize)
    make_xattrs(root, level)
    make_links(root)
    make_specials(root)
    make_modes(root)
    make_names(root)
    make_times(root, bigtime)
    settle_times(root)
    for k, v in count_kinds(root).items():
        print(f"{k} {v}")


if __name__ == "__main__":
    main()
