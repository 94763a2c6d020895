"""Deleted files from Python: ``fs.deleted()`` and ``fs.undelete()`` on a
small corpus the kernel wrote and deleted from (files of known content in
block-format directories, a subtree removed whole, a multi-extent file, a
short symlink), against what the kernel saw before the deletion (inode,
size, sha256, path) and against ``xfskit deleted --json`` of the same
image; the image must be byte-identical afterwards. Also the fleet
inventory's ``deleted=True``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

import xfskit
from xfskit.fleet import sha256_of
from conftest import HERE, SHARED_615, Mount, have_615, is_root, record_skip, run, tool

#: Debian's mkfs.xfs 6.1 defaults, and 6.15 with the 6.18 defaults
#: (parent pointers) when beside the project.
FORMATS = {
    "6.1": (False, []),
    "6.18": (True, ["-c", f"options={SHARED_615 / 'conf' / 'lts_6.18.conf'}"]),
}


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _content(i: int, n: int) -> bytes:
    """n bytes, different for each i (no two files alike)."""
    out = b""
    k = 0
    while len(out) < n:
        out += hashlib.sha256(f"{i}.{k}".encode()).digest()
        k += 1
    return out[:n]


def _image_sha(img: Path) -> str:
    return sha256_of(str(img))[0]


@pytest.fixture(scope="module", params=list(FORMATS))
def corpus(request, tmp_path_factory):
    """(image, {path: (ino, size, sha256)} of the deleted regular files,
    the deleted symlink's path, inode and target, the removed directory's
    inode)."""
    if not is_root():
        record_skip(f"deleted files ({request.param}): needs root for a loop mount")
    if not Path("/dev/loop-control").exists():
        record_skip(f"deleted files ({request.param}): no loop devices")
    v615, args = FORMATS[request.param]
    if v615 and not have_615():
        record_skip(f"deleted files ({request.param}): xfsprogs 6.15 is not beside the project")
    d = tmp_path_factory.mktemp(f"del-{request.param}")
    img = d / "c.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    run(tool("mkfs.xfs", v615) + ["-q", "-f"] + args + [str(img)], v615=v615)
    mnt = d / "m"
    names = []
    with Mount(img, mnt, ro=False):
        # Names long enough that every directory is in block format (a
        # short-form directory keeps no removed entry).
        for i in range(12):
            (mnt / f"a_root_file_with_a_longish_name_{i:02d}").write_bytes(_content(1000 + i, 100 + i))
        (mnt / "docs").mkdir()
        for i in range(30):
            p = f"docs/document_number_{i:02d}_with_a_long_name"
            (mnt / p).write_bytes(_content(i, 1 + i * 1700))
            names.append(p)
        os.symlink("document_number_01_with_a_long_name", mnt / "docs" / "a_short_symlink_to_a_document")
        (mnt / "gone" / "sub").mkdir(parents=True)
        for i in range(10):
            p = f"gone/removed_with_its_directory_{i:02d}"
            (mnt / p).write_bytes(_content(100 + i, 5000 * (i + 1)))
            names.append(p)
        for i in range(8):
            p = f"gone/sub/removed_deeper_down_in_the_tree_{i:02d}"
            (mnt / p).write_bytes(_content(200 + i, 3000 + i))
            names.append(p)
        # A file of many extents (every other block written).
        with open(mnt / "fragmented", "wb") as f:
            for k in range(24):
                f.seek(k * 8192)
                f.write(_content(300 + k, 4096))
        names.append("fragmented")
    # Mounted again, so that the inodes are on disk as they were.
    with Mount(img, mnt, ro=False):
        gone = {}
        delete = [p for p in names if not p.startswith("docs/") or int(p.split("_")[2]) % 3 == 0]
        for p in delete:
            st = os.stat(mnt / p)
            gone["/" + p] = (st.st_ino, st.st_size, _sha((mnt / p).read_bytes()))
        link = mnt / "docs" / "a_short_symlink_to_a_document"
        link_info = ("/docs/a_short_symlink_to_a_document", os.lstat(link).st_ino, os.readlink(link))
        gone_dir = os.stat(mnt / "gone").st_ino
        for p in delete:
            if not p.startswith("gone/"):
                os.remove(mnt / p)
        os.remove(link)
        subprocess.run(["rm", "-r", str(mnt / "gone")], check=True)
    return img, gone, link_info, gone_dir


def _xfskit_bin() -> Path | None:
    """The CLI built in the workspace (scripts/test.sh's cargo test pass
    builds it), or $XFSKIT_BIN."""
    if os.environ.get("XFSKIT_BIN"):
        return Path(os.environ["XFSKIT_BIN"])
    repo = HERE.parents[1]
    for target in (os.environ.get("CARGO_TARGET_DIR"), repo / "target"):
        if target:
            p = Path(target) / "debug" / "xfskit"
            if p.exists():
                return p
    return None


def test_deleted_names_and_undelete_writes_the_content(corpus, tmp_path):
    img, gone, (link_path, link_ino, link_target), gone_dir = corpus
    before = _image_sha(img)
    with xfskit.open(img) as fs:
        recs = fs.deleted()
        assert all(isinstance(r, xfskit.DeletedFile) for r in recs)
        by_ino = {r["inode"]: r for r in recs}
        assert len(by_ino) == len(recs)
        out = tmp_path / "out"
        out.mkdir()
        for path, (ino, size, sha) in gone.items():
            r = by_ino.get(ino)
            assert r is not None, f"{path} (inode {ino}) not found"
            assert r["type"] == "file", (path, r)
            assert r["path"] == path, (path, r)
            assert path in [n["path"] for n in r["names"]]
            assert r["confidence"] in ("confirmed", "named"), (path, r)
            assert r["size"] in (None, size)
            dest = out / str(ino)
            n = fs.undelete(r, dest)
            data = dest.read_bytes()
            assert n == len(data) == (size if r["size"] is not None else r["mapped_bytes"]), path
            assert len(data) >= size, path
            assert _sha(data[:size]) == sha, path
            assert data[size:] == bytes(len(data) - size), path
            assert os.stat(dest).st_mtime_ns == r["mtime"]["sec"] * 10**9 + r["mtime"]["nsec"]
        # The short symlink comes back as a symlink.
        lk = by_ino[link_ino]
        assert lk["type"] == "symlink" and lk["symlink"] == link_target and lk["path"] == link_path
        assert fs.undelete(lk, tmp_path / "link") == len(link_target)
        assert os.readlink(tmp_path / "link") == link_target
        # A removed directory has no data of its own.
        assert by_ino[gone_dir]["type"] == "dir" and by_ino[gone_dir]["path"] == "/gone"
        with pytest.raises(IsADirectoryError):
            fs.undelete(by_ino[gone_dir], tmp_path / "dir")
        assert not (tmp_path / "dir").exists()
        # An existing destination is refused, untouched.
        ino = gone["/fragmented"][0]
        (tmp_path / "taken").write_bytes(b"mine")
        with pytest.raises(FileExistsError):
            fs.undelete(by_ino[ino], tmp_path / "taken")
        assert (tmp_path / "taken").read_bytes() == b"mine"
        # A record as plain JSON (a line of deleted.jsonl) or an inode number
        # is found by a new scan; a number no deleted file has is ENOENT.
        plain = json.loads(json.dumps(by_ino[ino]))
        assert fs.undelete(plain, tmp_path / "again") == os.path.getsize(out / str(ino))
        assert (tmp_path / "again").read_bytes() == (out / str(ino)).read_bytes()
        fs.undelete(ino, str(tmp_path / "by-number"))
        assert (tmp_path / "by-number").read_bytes() == (out / str(ino)).read_bytes()
        live = fs.lstat("/docs").st_ino
        with pytest.raises(FileNotFoundError):
            fs.undelete(live, tmp_path / "live")
        # --quick: no free-space sweep; what it finds the full scan finds.
        quick = {r["inode"]: r for r in fs.deleted(quick=True)}
        assert set(quick) <= set(by_ino)
    with pytest.raises(ValueError):
        fs.deleted()  # closed
    assert _image_sha(img) == before, "the image changed"


def test_records_equal_the_cli(corpus):
    img, _, _, _ = corpus
    exe = _xfskit_bin()
    if exe is None:
        record_skip("deleted records against the CLI: no xfskit binary (build xfskit-cli, or set XFSKIT_BIN)")
    before = _image_sha(img)
    with xfskit.open(img) as fs:
        for quick in (False, True):
            cmd = [str(exe), "deleted", "--json", "-q"] + (["--quick"] if quick else []) + [str(img)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            cli = sorted(json.loads(r.stdout), key=lambda x: x["inode"])
            py = sorted((dict(x) for x in fs.deleted(quick=quick)), key=lambda x: x["inode"])
            assert cli and py == cli
    assert _image_sha(img) == before, "the image changed"


def test_fleet_inventory_with_deleted(corpus, tmp_path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        record_skip("fleet inventory with deleted files: pyarrow is not installed")
    import xfskit.fleet

    img, gone, (link_path, link_ino, _), gone_dir = corpus
    before = _image_sha(img)
    plain = xfskit.fleet.inventory([str(img)], str(tmp_path / "plain"), local=True, jobs=1, progress=False)
    withd = xfskit.fleet.inventory(
        [str(img)], str(tmp_path / "withd"), deleted=True, local=True, jobs=1, progress=False
    )
    assert plain["ok"].to_pylist() == withd["ok"].to_pylist() == [True]
    (pf,) = list((tmp_path / "plain" / "inventory").iterdir())
    (wf,) = list((tmp_path / "withd" / "inventory").iterdir())
    p, w = pq.read_table(pf), pq.read_table(wf)
    # The default output has no deleted columns; with them, the live rows
    # are the default rows, marked not deleted.
    assert "deleted" not in p.column_names
    assert w.column_names == p.column_names + ["deleted", "confidence", "deleted_record"]
    flags = w["deleted"].to_pylist()
    live = w.filter([not f for f in flags])
    assert live.drop_columns(["deleted", "confidence", "deleted_record"]).equals(p)
    assert set(live["confidence"].to_pylist()) == {None}
    import pyarrow as pa

    dt = w.filter(flags)
    times = ("atime", "mtime", "ctime", "btime")
    ns = {c: dt[c].cast(pa.int64()).to_pylist() for c in times}
    dele = dt.drop_columns(list(times)).to_pylist()
    for k, d in enumerate(dele):
        d.update({c: ns[c][k] for c in times})
    assert withd["rows"].to_pylist() == [p.num_rows + len(dele)]
    with xfskit.open(img) as fs:
        recs = {r["inode"]: r for r in fs.deleted()}
    # A row per full path of each record (one without a path when none).
    want = set()
    for r in recs.values():
        full = {n["path"] for n in r["names"] if n["path"]}
        want |= {(r["inode"], q) for q in full} or {(r["inode"], None)}
    assert {(d["ino"], d["path"]) for d in dele} == want
    for d in dele:
        r = recs[d["ino"]]
        assert json.loads(d["deleted_record"]) == r
        assert d["confidence"] == r["confidence"]
        assert (d["uid"], d["gid"], d["gen"], d["size"], d["nlink"]) == (
            r["uid"], r["gid"], r["generation"], r["size"], 0
        )
        for c, f in (("atime", "atime"), ("mtime", "mtime"), ("ctime", "ctime"), ("btime", "crtime")):
            assert d[c] == r[f]["sec"] * 10**9 + r[f]["nsec"], (c, d, r)
    rows = {d["path"]: d for d in dele}
    for path, (ino, size, _) in gone.items():
        assert rows[path]["ino"] == ino and rows[path]["mode"] == 0o100000
    assert rows[link_path]["mode"] == 0o120000 and rows["/gone"]["ino"] == gone_dir
    # Split in parts: the deleted rows are part 0's, the rows the same.
    split = tmp_path / "split"
    xfskit.fleet.inventory(
        [str(img)], str(split), deleted=True, split_inodes=20, local=True, jobs=1, progress=False
    )
    parts = sorted((split / "inventory").iterdir())
    assert len(parts) > 1
    key = ("path", "ino", "deleted", "deleted_record")
    got = sorted(
        (tuple(r[k] for k in key) for f in parts for r in pq.read_table(f).select(list(key)).to_pylist()),
        key=repr,
    )
    assert got == sorted((tuple(r[k] for k in key) for r in w.select(list(key)).to_pylist()), key=repr)
    part0 = pq.read_table(parts[0]).select(["deleted"]).to_pylist()
    assert sum(r["deleted"] for r in part0) == len(dele)
    # The command line's --deleted writes the same rows.
    cli_out = tmp_path / "cli"
    argv = ["inventory", str(img), "--out", str(cli_out), "--deleted", "--local", "-j", "1", "-q"]
    assert xfskit.fleet.main(argv) == 0
    (cf,) = list((cli_out / "inventory").iterdir())
    assert pq.read_table(cf).equals(w)
    assert _image_sha(img) == before, "the image changed"
