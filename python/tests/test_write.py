"""Writes through the package pass xfs_repair -n and read back through the
kernel; a damaged image gives CorruptError, never a crash."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import sys

import pytest

import xfskit
from conftest import Mount, have_615, is_root, record_skip, repair_n, run, tool


def make_image(path, defaults):
    geo = xfskit.mkfs(path, size="320m", defaults=defaults)
    assert geo["blocksize"] == 4096 and geo["agcount"] >= 1
    return path


@pytest.mark.parametrize("defaults", ["6.1", "6.18"])
def test_writes_pass_repair_and_kernel_reads_them(tmp_path, defaults):
    if defaults == "6.18" and not have_615():
        record_skip("writes on a 6.18-defaults image: xfs_repair 6.15 is not beside the project")
    img = make_image(tmp_path / "w.img", defaults)
    payload = os.urandom(5 << 20)
    with xfskit.open(img, writable=True) as fs:
        fs.makedirs("/a/b/c")
        fs.makedirs("/a/b/c", exist_ok=True)
        with pytest.raises(FileExistsError):
            fs.makedirs("/a/b")
        with fs.open("/a/b/c/big", "wb") as f:
            for i in range(0, len(payload), 1 << 20):
                f.write(payload[i:i + (1 << 20)])
        with fs.open("/a/log", "wb") as f:
            f.write(b"one\n")
        with fs.open("/a/log", "ab") as f:
            f.write(b"two\n")
        with fs.open("/a/log", "r+b") as f:
            f.seek(1)
            f.write(b"N")
            f.seek(0)
            assert f.read() == b"oNe\ntwo\n"
        with pytest.raises(FileExistsError):
            fs.open("/a/log", "xb")
        with fs.open("/a/text", "w") as t:
            t.write("héllo\n")
        for i in range(500):
            with fs.open(f"/a/b/f{i}", "wb") as f:
                f.write(str(i).encode() * 10)
        for i in range(0, 500, 2):
            fs.remove(f"/a/b/f{i}")
        fs.symlink("b/c/big", "/a/link")
        fs.symlink("t" * 600, "/a/longlink")
        fs.link("/a/log", "/a/log2")
        fs.rename("/a/text", "/a/b/text2")
        fs.mkdir("/gone")
        fs.rmdir("/gone")
        with pytest.raises(OSError) as e:
            fs.rmdir("/a")
        assert e.value.errno == errno.ENOTEMPTY
        with pytest.raises(IsADirectoryError):
            fs.remove("/a/b")
        fs.chmod("/a/log", 0o640)
        fs.chown("/a/log", 1000, 1001)
        fs.utime("/a/log", ns=(1_500_000_000_111_222_333, 1_600_000_000_444_555_666))
        fs.truncate("/a/b/f1", 3)
        fs.setxattr("/a/log", "user.color", b"blue")
        fs.setxattr("/a/log", "user.gone", b"x")
        fs.removexattr("/a/log", "user.gone")
        fs.setxattr("/a/log", "trusted.big", os.urandom(9000))
        with pytest.raises(FileExistsError):
            fs.setxattr("/a/log", "user.color", b"red", os.XATTR_CREATE)
        # Reads see the changes before any sync.
        assert fs.read_bytes("/a/b/c/big") == payload
        assert fs.getxattr("/a/log2", "user.color") == b"blue"
        assert fs.stat("/a/log").st_nlink == 2
    r = repair_n(img)
    assert r.returncode == 0, r.stdout + r.stderr
    if not is_root():
        record_skip("kernel read-back of package writes: needs root for a loop mount")
    with Mount(img, tmp_path / "mnt") as m:
        assert hashlib.sha256((m / "a/b/c/big").read_bytes()).digest() == hashlib.sha256(payload).digest()
        assert (m / "a/log").read_bytes() == b"oNe\ntwo\n"
        assert (m / "a/b/text2").read_text() == "héllo\n"
        assert os.readlink(m / "a/link") == "b/c/big" and os.readlink(m / "a/longlink") == "t" * 600
        st = os.lstat(m / "a/log")
        assert stat.S_IMODE(st.st_mode) == 0o640 and (st.st_uid, st.st_gid) == (1000, 1001)
        assert st.st_nlink == 2 and st.st_ino == os.lstat(m / "a/log2").st_ino
        assert (st.st_atime_ns, st.st_mtime_ns) == (1_500_000_000_111_222_333, 1_600_000_000_444_555_666)
        assert os.getxattr(m / "a/log", "user.color") == b"blue"
        assert "user.gone" not in os.listxattr(m / "a/log")
        assert len(os.getxattr(m / "a/log", "trusted.big")) == 9000
        names = sorted(os.listdir(m / "a/b"))
        assert names == sorted(["c", "text2"] + [f"f{i}" for i in range(1, 500, 2)])
        assert (m / "a/b/f1").read_bytes() == b"111"
        assert not (m / "gone").exists()


def test_read_only_handles_refuse_writes(tmp_path):
    img = make_image(tmp_path / "r.img", "6.1")
    with xfskit.open(img) as fs:
        with pytest.raises(OSError) as e:
            fs.open("/x", "wb")
        assert e.value.errno == errno.EROFS


def inode_byte(img, ino: int) -> int:
    out = run(tool("xfs_db", False) + ["-r", "-c", f"convert inode {ino} byte", str(img)]).stdout
    # "0x1234 (4660)"
    return int(out.split()[0], 16)


def test_damaged_inode_gives_corrupt_error(tmp_path):
    img = tmp_path / "bad.img"
    xfskit.mkfs(img, size="320m", defaults="6.1")
    with xfskit.open(img, writable=True) as fs:
        fs.makedirs("/d")
        for i in range(20):
            with fs.open(f"/d/f{i}", "wb") as f:
                f.write(b"x" * 100)
        victim = fs.stat("/d/f7").st_ino
    off = inode_byte(img, victim)
    with open(img, "r+b") as f:
        f.seek(off + 8)
        b = f.read(8)
        f.seek(off + 8)
        f.write(bytes(x ^ 0x5A for x in b))
    # In a child interpreter too: a crash would show as a signal.
    code = (
        "import sys, xfskit\n"
        f"fs = xfskit.open({str(img)!r})\n"
        "try:\n"
        "    fs.stat('/d/f7')\n"
        "except xfskit.CorruptError as e:\n"
        "    print('corrupt', e.errno, e)\n"
    )
    # From the image's directory: `-c` puts the working directory first on
    # sys.path, and python/ holds the source package without its native module.
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=img.parent
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("corrupt 117 ")
    with xfskit.open(img) as fs:
        with pytest.raises(xfskit.CorruptError) as e:
            fs.stat("/d/f7")
        assert isinstance(e.value, OSError) and e.value.errno == errno.EUCLEAN
        assert f"inode {victim}" in str(e.value)
        # The rest of the directory still reads; the entry names the damage.
        ok = [x for x in fs.scandir("/d") if x.name != "f7"]
        assert len(ok) == 19 and all(x.stat().st_size == 100 for x in ok)
        with pytest.raises(xfskit.CorruptError):
            list(fs.bulkstat())
        rep = fs.check()
        assert not rep.clean and any(str(victim) in p.where for p in rep.problems)


def test_repair_and_undo(tmp_path):
    """xfskit.repair fixes superblock counters damaged with xfs_db (Debian's
    or 6.15), writing an undo file; xfskit.undo brings the damage back byte
    for byte; a dry run writes nothing."""
    img = tmp_path / "r.img"
    with open(img, "wb") as f:
        f.truncate(320 << 20)
    run(["mkfs.xfs", "-q", "-f", str(img)])
    run(["xfs_db", "-x", "-c", "sb 0", "-c", "write -d fdblocks 1234", str(img)])
    damaged = img.read_bytes()
    r = xfskit.repair(img, dry_run=True)
    assert not r["clean"] and r["fixes"] and not r["remaining"], r
    assert img.read_bytes() == damaged
    undo = tmp_path / "r.undo"
    r = xfskit.repair(img, undo=undo)
    assert r["clean"], r
    assert any("fdblocks" in p for p in r["found"]), r
    assert repair_n(img).returncode == 0
    again = xfskit.repair(img)
    assert again["found_total"] == 0 and again["clean"]
    u = xfskit.undo(undo, img)
    assert u["bytes"] > 0 and not u["torn_tail"]
    assert img.read_bytes() == damaged


def test_repair_puts_a_lost_file_back_and_fixes_link_counts(tmp_path):
    """xfskit.repair on namespace damage made with Debian's xfs_db: a file's
    entry pointed at a free inode (the file lands in lost+found under its
    inode number, as xfs_repair puts it there, on a filesystem without
    parent pointers) and another file's link count made wrong."""
    img = tmp_path / "ns.img"
    xfskit.mkfs(img, size="320m", defaults="6.1")
    with xfskit.open(img, writable=True) as fs:
        fs.makedirs("/d")
        for name in ("a", "b"):
            with fs.open(f"/d/{name}", "wb") as f:
                f.write(name.encode() * 10)
    with xfskit.open(img) as fs:
        d, a, b = (fs.stat(p).st_ino for p in ("/d", "/d/a", "/d/b"))
    out = run(tool("xfs_db", False) + ["-r", "-c", f"inode {d}", "-c", "print u3", str(img)]).stdout
    index = next(
        line.split("[")[1].split("]")[0]
        for line in out.splitlines()
        if line.strip().endswith('.name = "a"')
    )
    run(
        tool("xfs_db", False)
        + ["-x", "-c", f"inode {d}", "-c", f"write u3.sfdir3.list[{index}].inumber.i4 {d + 40}",
           "-c", f"inode {b}", "-c", "write core.nlinkv2 5", str(img)]
    )
    assert repair_n(img).returncode != 0
    r = xfskit.repair(img)
    assert r["clean"], r
    assert any("lost+found" in f for f in r["fixes"]), r
    assert repair_n(img).returncode == 0
    with xfskit.open(img) as fs:
        with fs.open(f"/lost+found/{a}", "rb") as f:
            assert f.read() == b"a" * 10
        assert fs.stat("/d/b").st_nlink == 1
        assert sorted(fs.listdir("/d")) == ["b"]
