"""The package's view of kernel-made images equals a kernel loop mount's."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat

import pytest

import xfskit

FIELDS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
          "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_rdev", "st_blksize")


def kernel_tree(mnt):
    """{image path: lstat} and the walk of a mount, as bytes paths."""
    out = {}
    walk = []
    top = os.fsencode(str(mnt))
    for d, dirs, files in os.walk(top):
        rel = b"/" + os.path.relpath(d, top).lstrip(b".").lstrip(b"/") if d != top else b"/"
        walk.append((rel, sorted(dirs), sorted(files)))
        for n in dirs + files:
            out[os.path.join(rel, n)] = os.lstat(os.path.join(d, n))
    return out, walk


def outcome(f):
    try:
        return f()
    except OSError as e:
        return ("errno", e.errno)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_walk_and_stat_equal_kernel(kernel_image, mounted):
    k_stats, k_walk = kernel_tree(mounted)
    assert len(k_stats) > 3000
    with xfskit.open(kernel_image) as fs:
        walk = [(d, sorted(ds), sorted(fs_)) for d, ds, fs_ in fs.walk(b"/")]
        assert sorted(walk) == sorted(k_walk)
        bottom = [d for d, _, _ in fs.walk(b"/", topdown=False)]
        assert sorted(bottom) == sorted(d for d, _, _ in k_walk)
        assert bottom.index(b"/dirs/node") < bottom.index(b"/dirs") < bottom.index(b"/")
        visited = []
        for d, ds, _ in fs.walk("/"):
            visited.append(d)
            if d == "/":
                ds.remove("dirs")
        assert "/etc" in visited and not any(v.startswith("/dirs") for v in visited)
        for p, k in k_stats.items():
            st = fs.lstat(p)
            for f in FIELDS:
                assert getattr(st, f) == getattr(k, f), (p, f)
            assert st.st_mtime == pytest.approx(k.st_mtime)
            assert st[stat.ST_MODE] == k[stat.ST_MODE] and st[stat.ST_MTIME] == k[stat.ST_MTIME]


def test_contents_links_xattrs_equal_kernel(kernel_image, mounted):
    k_stats, _ = kernel_tree(mounted)
    top = os.fsencode(str(mounted))
    with xfskit.open(kernel_image) as fs:
        for p, k in k_stats.items():
            host = top + p
            if stat.S_ISREG(k.st_mode):
                with open(host, "rb") as f:
                    want = f.read()
                with fs.open(p) as f:
                    assert sha(f.read()) == sha(want), p
            elif stat.S_ISLNK(k.st_mode):
                assert fs.readlink(p) == os.readlink(host), p
            if not stat.S_ISLNK(k.st_mode):
                names = sorted(os.listxattr(host))
                assert sorted(fs.listxattr(p)) == names, p
                for n in names:
                    assert fs.getxattr(p, n) == os.getxattr(host, n), (p, n)
            if not stat.S_ISLNK(k.st_mode):
                # stat follows nothing here, so equals lstat.
                assert fs.stat(p) == fs.lstat(p)


def test_follow_symlinks_inside_image(kernel_image, mounted):
    with xfskit.open(kernel_image) as fs:
        assert fs.stat("/links/rel").st_ino == os.stat(mounted / "etc/os-release").st_ino
        # An absolute target resolves from the image's root, not the host's.
        assert fs.stat("/links/abs_dir").st_ino == os.stat(mounted / "etc").st_ino
        assert fs.listdir("/links/abs_dir") == ["os-release"]
        assert fs.isdir("/links/abs_dir") and not fs.islink("/etc")
        assert fs.open("/links/abs_dir/os-release").read().startswith(b"NAME=")
        assert not fs.exists("/links/long_dangling") and fs.lexists("/links/long_dangling")
        with pytest.raises(OSError) as e:
            fs.stat("/links/loop_a")
        assert e.value.errno == errno.ELOOP


def test_scandir_entries(kernel_image, mounted):
    with xfskit.open(kernel_image) as fs, os.scandir(mounted / "links") as it:
        k = {e.name: e for e in it}
        mine = {e.name: e for e in fs.scandir("/links")}
        assert mine.keys() == k.keys()
        for n, e in mine.items():
            assert e.inode() == k[n].inode()
            assert e.is_symlink() == k[n].is_symlink()
            # Same answers, or the same errno (a symlink loop raises ELOOP).
            assert outcome(e.is_dir) == outcome(k[n].is_dir), n
            assert outcome(e.is_file) == outcome(k[n].is_file), n
            assert e.path == "/links/" + n and os.fspath(e) == e.path
            assert e.stat(follow_symlinks=False).st_ino == k[n].stat(follow_symlinks=False).st_ino
        assert fs.listdir(b"/links") == [os.fsencode(n) for n in fs.listdir("/links")]


def test_open_and_read_a_scandir_entry(kernel_image, mounted):
    """fs.open(entry) and fs.read_bytes(entry) read the entry's inode: the
    kernel's contents for every file reached by scandir (after its stat, as
    a walk does, and without one); a symbolic link's entry is followed by
    its path, as os.open(entry) does; a directory's is EISDIR."""
    top = os.fsencode(str(mounted))
    seen = {"f": 0, "l": 0, "d": 0}
    with xfskit.open(kernel_image) as fs:
        stack = [b"/"]
        while stack:
            d = stack.pop()
            for k, e in enumerate(fs.scandir(d)):
                host = top + e.path
                if k % 2:
                    e.stat(follow_symlinks=False)
                if e.is_symlink():
                    seen["l"] += 1
                    want = outcome(lambda: open(host, "rb").read())
                    assert outcome(lambda: fs.read_bytes(e)) == want, e.path
                    assert outcome(lambda: fs.open(e).read()) == want, e.path
                elif e.is_dir():
                    seen["d"] += 1
                    stack.append(e.path)
                    with pytest.raises(IsADirectoryError):
                        fs.open(e)
                elif e.is_file():
                    seen["f"] += 1
                    with open(host, "rb") as f:
                        want = f.read()
                    assert fs.read_bytes(e) == want, e.path
                    with fs.open(e, buffering=0) as f:
                        assert f.read() == want, e.path
                    # Another inode's stat in between: still this one's data.
                    fs.lstat(b"/")
                    assert sha(fs.read_bytes(e)) == sha(want), e.path
    assert min(seen.values()) > 0, seen


def test_open_is_raw_io_with_seek(kernel_image, mounted):
    want = (mounted / "data" / "fragmented").read_bytes()
    with xfskit.open(kernel_image) as fs:
        raw = fs.open("/data/fragmented", buffering=0)
        assert isinstance(raw, io.RawIOBase) and raw.seekable() and raw.readable()
        buf = bytearray(10000)
        raw.seek(60000)
        assert raw.readinto(buf) == 10000 and bytes(buf) == want[60000:70000]
        assert raw.seek(-10, io.SEEK_END) == len(want) - 10
        assert raw.read() == want[-10:] and raw.read(5) == b""
        raw.close()
        f = fs.open("/data/fragmented")
        assert isinstance(f, io.BufferedReader)
        f.seek(123457)
        assert f.read(4096) == want[123457:123457 + 4096]
        with fs.open("/etc/os-release", "r") as t:
            assert t.readline() == "NAME=xfskit-test\n"
        st = fs.open("/data/sparse", buffering=0).stat()
        assert st.st_size == os.stat(mounted / "data/sparse").st_size


def test_errors_are_the_kernel_errnos(kernel_image, mounted):
    with xfskit.open(kernel_image) as fs:
        cases = [
            (lambda: fs.stat("/nope"), FileNotFoundError, lambda: os.stat(mounted / "nope")),
            (lambda: fs.listdir("/etc/os-release"), NotADirectoryError,
             lambda: os.listdir(mounted / "etc/os-release")),
            (lambda: fs.stat("/etc/os-release/x"), NotADirectoryError,
             lambda: os.stat(mounted / "etc/os-release/x")),
            (lambda: fs.open("/etc"), IsADirectoryError, lambda: open(mounted / "etc", "rb")),
            (lambda: fs.getxattr("/etc/os-release", "user.none"), OSError,
             lambda: os.getxattr(mounted / "etc/os-release", "user.none")),
            (lambda: fs.readlink("/etc"), OSError, lambda: os.readlink(mounted / "etc")),
            (lambda: fs.stat("/" + "y" * 300), OSError, lambda: os.stat(mounted / ("y" * 300))),
        ]
        for mine, cls, kernel in cases:
            with pytest.raises(OSError) as k:
                kernel()
            with pytest.raises(cls) as e:
                mine()
            assert e.value.errno == k.value.errno
        with pytest.raises(OSError) as e:
            fs.mkdir("/x")
        assert e.value.errno == errno.EROFS
    with pytest.raises(ValueError):
        fs.stat("/")


def test_info_bulkstat_check_extract(kernel_image, mounted, tmp_path):
    k_stats, _ = kernel_tree(mounted)
    by_ino = {}
    for p, k in k_stats.items():
        by_ino[k.st_ino] = k
    by_ino[os.stat(mounted).st_ino] = os.stat(mounted)
    with xfskit.open(kernel_image) as fs:
        info = fs.info
        assert info["data"]["bsize"] == os.statvfs(mounted).f_bsize
        assert info["inodes"]["root"] == os.stat(mounted).st_ino
        recs = list(fs.bulkstat())
        assert {r.ino for r in recs} == set(by_ino)
        for r in recs:
            k = by_ino[r.ino]
            assert (r.mode, r.nlink, r.uid, r.gid, r.size, r.mtime_ns) == (
                k.st_mode, k.st_nlink, k.st_uid, k.st_gid, k.st_size, k.st_mtime_ns)
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            from conftest import record_skip
            record_skip("bulkstat_table: pyarrow is not installed")
        t = fs.bulkstat_table()
        assert t.num_rows == len(recs)
        assert t.column("ino").to_pylist() == [r.ino for r in recs]
        assert t.column("size").to_pylist() == [r.size for r in recs]
        assert [v.value for v in t.column("mtime")] == [r.mtime_ns for r in recs]
        rep = fs.check()
        assert rep.clean and rep.problems == [] and rep.stats["inodes"] >= len(recs)
        # The smallest memory bound spills the records: the same result.
        small = fs.check(memory=1)
        assert small.clean and small.stats == rep.stats
        r = fs.extract(tmp_path / "out", "/etc")
        assert r["entries"] >= 2
        assert (tmp_path / "out" / "os-release").read_bytes() == (mounted / "etc/os-release").read_bytes()


def test_file_object_source_equals_path(kernel_image):
    with xfskit.open(kernel_image) as a, open(kernel_image, "rb") as f, xfskit.open(f) as b:
        for (d1, ds1, f1), (d2, ds2, f2) in zip(a.walk("/dirs"), b.walk("/dirs")):
            assert (d1, ds1, f1) == (d2, ds2, f2)
        assert b.read_bytes("/data/random.bin") == a.read_bytes("/data/random.bin")
        assert b.listxattr("/xattrs/remote") == a.listxattr("/xattrs/remote")
        assert b.check().clean


@pytest.mark.parametrize(
    "fmt,opts",
    [("vmdk", "subformat=streamOptimized"), ("vhdx", "subformat=dynamic"), ("vpc", "subformat=dynamic"), ("vdi", "static=off")],
)
def test_vm_disk_files_read_as_the_raw_image(kernel_image, tmp_path, fmt, opts):
    """The kernel's image converted by qemu-img to a VM disk format reads,
    by path and from a file object, as the raw image does."""
    import shutil
    import subprocess

    if not shutil.which("qemu-img"):
        from conftest import record_skip

        record_skip(f"VM disk files ({fmt}): no qemu-img")
    out = tmp_path / f"disk.{fmt}"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", fmt, "-o", opts, str(kernel_image), str(out)], check=True)
    with xfskit.open(kernel_image) as a, xfskit.open(out) as b, open(out, "rb") as f, xfskit.open(f) as c:
        want = list(a.walk("/dirs"))
        assert list(b.walk("/dirs")) == want
        assert list(c.walk("/dirs")) == want
        data = a.read_bytes("/data/random.bin")
        assert b.read_bytes("/data/random.bin") == data
        assert c.read_bytes("/data/random.bin") == data
