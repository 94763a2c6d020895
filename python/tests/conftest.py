"""Images made by mkfs.xfs and filled through a kernel loop mount, and the
tools the tests compare with. Tests that cannot run print why and add a
line to $XFSKIT_SKIP_LOG (scripts/test.sh counts them as skipped)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SHARED_615 = Path(os.environ.get("XFSKIT_XFSPROGS_615", HERE.parents[2] / "shared" / "xfsprogs-6.15"))


def record_skip(why: str) -> None:
    print(why)
    log = os.environ.get("XFSKIT_SKIP_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"python: {why}\n")
    pytest.skip(why)


def is_root() -> bool:
    return os.geteuid() == 0


def have_615() -> bool:
    return (SHARED_615 / "libexec" / "xfs_repair").exists()


def tool(name: str, v615: bool) -> list[str]:
    """The command line of an xfsprogs tool, 6.15 (beside the project) or Debian's."""
    if v615:
        return [str(SHARED_615 / "libexec" / name)]
    return [name]


def run(cmd: list[str], v615: bool = False, check: bool = True, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if v615:
        env["LD_LIBRARY_PATH"] = str(SHARED_615 / "lib")
    env.update({"TEST_DIR": "/tmp", "TEST_DEV": "/dev/null", "QA_CHECK_FS": "1"})
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}): {r.stdout}\n{r.stderr}")
    return r


def repair_n(img: Path) -> subprocess.CompletedProcess:
    """xfs_repair -n, 6.15 when beside the project (it knows every feature
    xfskit writes), else Debian's."""
    v615 = have_615()
    return run(tool("xfs_repair", v615) + ["-n", str(img)], v615=v615, check=False)


class Mount:
    """A kernel loop mount of an image, unmounted on exit."""

    def __init__(self, img: Path, mnt: Path, ro: bool = True):
        self.img, self.mnt, self.ro = img, mnt, ro

    def __enter__(self) -> Path:
        self.mnt.mkdir(parents=True, exist_ok=True)
        opts = "loop,ro" if self.ro else "loop"
        run(["mount", "-o", opts, str(self.img), str(self.mnt)])
        return self.mnt

    def __exit__(self, *exc) -> None:
        # A busy unmount (a child still holding a file of the mount for a
        # moment) is retried, as the Rust tests do; any other failure, or a
        # mount still busy after 10 s, fails the test.
        for _ in range(50):
            r = run(["umount", str(self.mnt)], check=False)
            if r.returncode == 0:
                return
            if "busy" not in r.stderr:
                break
            time.sleep(0.2)
        raise AssertionError(f"umount {self.mnt} failed ({r.returncode}): {r.stderr}")


def populate(root: Path) -> None:
    """A tree that takes every format the reader has: short-form, block,
    leaf and node directories; inline, extent and remote symlinks; small,
    sparse and multi-extent files; hard links; short-form, leaf and remote
    xattrs; ACLs; special files; names that are not UTF-8."""
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text("NAME=xfskit-test\nID=test\n")
    (root / "empty").write_bytes(b"")
    big = root / "data"
    big.mkdir()
    (big / "random.bin").write_bytes(os.urandom(3 << 20))
    with open(big / "sparse", "wb") as f:
        f.seek(50 << 20)
        f.write(b"tail")
        f.seek(1 << 20)
        f.write(b"middle")
    with open(big / "fragmented", "wb") as f:
        for i in range(64):
            f.seek(i * 64 * 1024)
            f.write(bytes([i]) * 4096)
    # Directories of every size: block, leaf, node.
    for n, name in ((5, "small"), (60, "block"), (400, "leaf"), (3000, "node")):
        d = root / "dirs" / name
        d.mkdir(parents=True)
        for i in range(n):
            (d / f"entry-{i:05d}-with-a-longer-name").write_bytes(str(i).encode())
    # Links.
    (root / "links").mkdir()
    os.symlink("../etc/os-release", root / "links" / "rel")
    os.symlink("/etc", root / "links" / "abs_dir")
    os.symlink("d/" * 450, root / "links" / "long_dangling")
    os.symlink("loop_b", root / "links" / "loop_a")
    os.symlink("loop_a", root / "links" / "loop_b")
    os.link(root / "etc" / "os-release", root / "links" / "hard")
    # Xattrs: short form, many (leaf), a remote value.
    x = root / "xattrs"
    x.mkdir()
    (x / "few").write_text("few")
    os.setxattr(x / "few", "user.one", b"1")
    os.setxattr(x / "few", "trusted.two", b"2")
    (x / "many").write_text("many")
    for i in range(80):
        os.setxattr(x / "many", f"user.attr{i:03d}", os.urandom(40))
    (x / "remote").write_text("remote")
    os.setxattr(x / "remote", "user.big", os.urandom(20000))
    if shutil.which("setfacl"):
        subprocess.run(["setfacl", "-m", "u:1234:rw", str(x / "few")], check=True)
    # Special files, owners, modes, odd names.
    os.mkfifo(root / "fifo")
    os.mknod(root / "chardev", 0o600 | 0o020000, os.makedev(1, 7))
    (root / "owned").write_text("owned")
    os.chown(root / "owned", 1234, 5678)
    os.chmod(root / "owned", 0o4751)
    os.utime(root / "owned", ns=(1_000_000_123, 2_000_000_456))
    (root / os.fsdecode(b"name-\xff-not-utf8")).write_text("bytes")
    (root / "unicodé ✓").write_text("unicode")


FORMATS = {
    # Debian's mkfs.xfs 6.1 defaults.
    "6.1": (False, []),
    # 1 KiB blocks and 8 KiB directory blocks, 512-byte inodes.
    "small-blocks": (False, ["-b", "size=1024", "-n", "size=8192", "-i", "size=512"]),
    # mkfs.xfs 6.15 with the xfsprogs 6.18 defaults (parent pointers...).
    "6.18": (True, ["-c", f"options={SHARED_615 / 'conf' / 'lts_6.18.conf'}"]),
}


@pytest.fixture(scope="session", params=list(FORMATS))
def kernel_image(request, tmp_path_factory) -> Path:
    """A 400 MB image made by mkfs.xfs and filled by the kernel (clean log)."""
    if not is_root():
        record_skip(f"kernel-made image ({request.param}): needs root for a loop mount")
    if not Path("/dev/loop-control").exists():
        record_skip(f"kernel-made image ({request.param}): no loop devices")
    v615, args = FORMATS[request.param]
    if v615 and not have_615():
        record_skip(f"kernel-made image ({request.param}): xfsprogs 6.15 is not beside the project")
    d = tmp_path_factory.mktemp(f"img-{request.param}")
    img = d / "fs.img"
    with open(img, "wb") as f:
        f.truncate(400 << 20)
    run(tool("mkfs.xfs", v615) + ["-q", "-f"] + args + [str(img)], v615=v615)
    with Mount(img, d / "mnt", ro=False) as mnt:
        populate(mnt)
    return img


@pytest.fixture()
def mounted(kernel_image, tmp_path):
    """The kernel's read-only view of the image, mounted for one test."""
    with Mount(kernel_image, tmp_path / "mnt", ro=True) as mnt:
        yield mnt
