"""A realtime group filesystem (mkfs.xfs 6.15 -m metadir=1 -r rtdev=FILE,
rgcount=3) read through ``xfskit.open(..., rtdev=)``: a realtime file's
bytes, placed by group number on the realtime device, equal what was
written there, and the check with the device finds nothing, as
``xfs_repair -n -r`` 6.15 finds nothing."""

from __future__ import annotations

import os
import re

import xfskit
from conftest import SHARED_615, have_615, record_skip, run

BS = 4096


def db(img, *cmds, rtdev=None, x=False):
    args = [str(SHARED_615 / "libexec" / "xfs_db")] + (["-x"] if x else ["-r"])
    if rtdev is not None:
        args += ["-R", str(rtdev)]
    for c in cmds:
        args += ["-c", c]
    return run(args + [str(img)], v615=True).stdout


def field(out: str, name: str) -> int:
    return int(re.search(rf"^{re.escape(name)} = (\d+)", out, re.M).group(1))


def test_realtime_group_file_read_with_rtdev(tmp_path):
    if not have_615():
        record_skip("xfsprogs 6.15 is missing (mkfs.xfs -m metadir=1 -r rtdev)")
    img, rt = tmp_path / "rtg.img", tmp_path / "rtg.rtdev"
    for p in (img, rt):
        with open(p, "wb") as f:
            f.truncate(64 << 20)
    proto = tmp_path / "proto"
    proto.write_text("/\n0 0\nd--755 0 0\nrtfile ---644 0 0 /dev/null\n$\n")
    run([str(SHARED_615 / "libexec" / "mkfs.xfs"), "-q", "-f", "-b", "size=4096",
         "-m", "metadir=1", "-d", "agcount=2", "-r", f"rtdev={rt},extsize=4k,rgcount=3",
         "-p", str(proto), str(img)], v615=True)
    sb = db(img, "sb 0", "print rgblklog rgextents")
    log, per = field(sb, "rgblklog"), field(sb, "rgextents")
    ino = int(re.search(r"^\S+\s+(\d+)\s.* rtfile \(good\)$", db(img, "ls /"), re.M).group(1))
    # Six blocks at block 10 of group 2: on the device after two groups.
    group, block, blocks = 2, 10, 6
    data = os.urandom(blocks * BS - 77)
    with open(rt, "r+b") as f:
        f.seek((group * per + block) * BS)
        f.write(data)
    writes = ["core.realtime 1", f"core.size {len(data)}", "core.nextents 1",
              f"core.nblocks {blocks}", "u3.bmx[0].startoff 0",
              f"u3.bmx[0].startblock {(group << log) | block}",
              f"u3.bmx[0].blockcount {blocks}", "u3.bmx[0].extentflag 0"]
    db(img, f"inode {ino}", *[f"write -d {w}" for w in writes], x=True)
    repair = [str(SHARED_615 / "libexec" / "xfs_repair"), "-r", str(rt), str(img)]
    run(repair, v615=True)
    assert run(repair[:1] + ["-n"] + repair[1:], v615=True, check=False).returncode == 0

    with xfskit.open(img, rtdev=rt) as fs:
        assert fs.read_bytes("/rtfile") == data
        assert fs.check().clean
