"""xfskit.fleet: inventory, check and find over a dozen images (one served
over HTTP, one damaged, one missing URL), on a local Ray instance and on the
process pool (--local); the Parquet results equal what each image gives
when opened on its own (bulkstat, walk, check) and what its source tree
holds."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import xfskit
import xfskit.fleet
from conftest import record_skip, run
from test_remote import s3  # noqa: F401  (the moto S3 server fixture)

N_IMAGES = 12
NEEDLE = b"the needle file, in every third image\n" * 100


def _needs_pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        record_skip("fleet: pyarrow is not installed")


def _tree(root: Path, i: int) -> None:
    """Image i's source: its own host name, 5 + 7i files, and in every
    third image the same needle file; links, an xattr, odd names."""
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text(f"host-{i}\n")
    d = root / "data" / "sub"
    d.mkdir(parents=True)
    for j in range(5 + 7 * i):
        (d / f"f{j:03d}").write_bytes(hashlib.sha256(f"{i}/{j}".encode()).digest() * (j % 9))
    if i % 3 == 0:
        (root / "common").mkdir()
        (root / "common" / "needle.bin").write_bytes(NEEDLE)
    if i % 2 == 0:
        os.link(root / "etc" / "hostname", root / "etc" / "hostname.hard")
        os.symlink("../etc/hostname", root / "data" / "link")
    if i % 4 == 1:
        os.setxattr(root / "etc" / "hostname", "user.fleet", str(i).encode())
    if i == 5:
        (root / os.fsdecode(b"not-utf8-\xfe")).write_bytes(b"x")
        (root / "unicodé").write_bytes(b"y")


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Files of one directory with HEAD and single Range GETs."""

    root: Path

    def log_message(self, *a):  # quiet
        pass

    def _file(self):
        p = self.root / self.path.lstrip("/")
        return p if p.is_file() else None

    def do_HEAD(self):
        p = self._file()
        if p is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(p.stat().st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{int(p.stat().st_mtime_ns)}"')
        self.end_headers()

    def do_GET(self):
        p = self._file()
        if p is None:
            self.send_error(404)
            return
        size = p.stat().st_size
        rng = self.headers.get("Range")
        start, end = 0, size - 1
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = min(int(b), size - 1) if b else size - 1
        with open(p, "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{int(p.stat().st_mtime_ns)}"')
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The images: 12 built by xfskit.build (image 1 served over HTTP,
    alternately the 6.1 and 6.18 defaults), a damaged copy of image 0,
    and a URL the server does not have."""
    _needs_pyarrow()
    tmp = tmp_path_factory.mktemp("fleet")
    srcs, images = [], []
    for i in range(N_IMAGES):
        src = tmp / f"src{i}"
        _tree(src, i)
        img = tmp / f"img{i:02d}.img"
        xfskit.build(src, img, defaults="6.1" if i % 2 else None)
        srcs.append(src)
        images.append(str(img))
    # Damage: one byte of a file's inode (its CRC no longer matches).
    damaged = tmp / "damaged.img"
    damaged.write_bytes(Path(images[0]).read_bytes())
    with open(damaged, "r+b") as f:
        off = _inode_offset(images[0], "/data/sub/f003") + 100
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
    served = tmp / "served"
    served.mkdir()
    os.link(images[1], served / "img01.img")
    handler = type("H", (_RangeHandler,), {"root": served})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    sources = list(images)
    sources[1] = f"{base}/img01.img"
    sources += [str(damaged), f"{base}/missing.img"]
    yield {
        "tmp": tmp,
        "srcs": srcs,
        "local": images,
        "sources": sources,
        "damaged": str(damaged),
        "missing": f"{base}/missing.img",
    }
    httpd.shutdown()


def _inode_offset(img: str, path: str) -> int:
    """Byte offset of the inode of ``path``: its AG's start, then its
    number within the AG times the inode size."""
    with xfskit.open(img) as fs:
        meta = fs.info["meta_data"]
        bsize = fs.info["data"]["bsize"]
        ino = fs.lstat(path).st_ino
    agblklog = (meta["agsize"] - 1).bit_length()
    inopblog = (bsize // meta["isize"]).bit_length() - 1
    agno = ino >> (agblklog + inopblog)
    agino = ino & ((1 << (agblklog + inopblog)) - 1)
    return agno * meta["agsize"] * bsize + agino * meta["isize"]


@pytest.fixture(scope="module")
def ray_local():
    try:
        import ray
    except ImportError:
        record_skip("fleet on Ray: ray is not installed (pip install 'xfskit[fleet]')")
    # As xfskit.fleet does when it starts Ray: not from python/, whose
    # xfskit (no native module) Ray's workers would import first.
    with xfskit.fleet._neutral_cwd():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(params=["ray", "local"])
def engine(request):
    """How the scans run: on the local Ray instance (2 CPUs), or the
    process pool (2 processes)."""
    if request.param == "ray":
        request.getfixturevalue("ray_local")
        return {"local": False, "jobs": 2}
    return {"local": True, "jobs": 2}


def _expected_paths(src: Path) -> set:
    out = {"/"}
    for top, dirs, files in os.walk(os.fsencode(src)):
        rel = top[len(os.fsencode(src)):]
        for n in dirs + files:
            out.add(os.fsdecode(rel + b"/" + n))
    return out


def _open(source):
    return xfskit.open(source)


def test_inventory(fleet, engine, tmp_path):
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    out = tmp_path / "inv"
    summary = xfskit.fleet.inventory(fleet["sources"], str(out), hash="sha256", **engine)
    rows = {r["image"]: r for r in summary.to_pylist()}
    assert set(rows) == set(fleet["sources"])
    # The missing URL is a row with its error; the job went on.
    assert not rows[fleet["missing"]]["ok"]
    assert "404" in rows[fleet["missing"]]["error"] or "Not" in rows[fleet["missing"]]["error"]
    dataset = ds.dataset(str(out / "inventory"), format="parquet").to_table()
    ok = [s for s in fleet["sources"] if rows[s]["ok"]]
    assert dataset.num_rows == sum(rows[s]["rows"] for s in ok)
    assert pq.read_table(out / "images.parquet").num_rows == len(fleet["sources"])

    for i, source in enumerate(fleet["sources"][:N_IMAGES]):
        assert rows[source]["ok"], rows[source]
        t = dataset.filter(ds.field("image") == source)
        assert t.num_rows == rows[source]["rows"] > 0
        times = ("atime", "mtime", "ctime", "btime")
        got = t.drop_columns(list(times)).to_pydict()
        ns_of = list(zip(*(t[c].cast(pa.int64()).to_pylist() for c in times)))
        paths = [
            os.fsdecode(b) if b is not None else p for p, b in zip(got["path"], got["path_bytes"])
        ]
        # Every path of the source tree, and nothing else.
        assert set(paths) == _expected_paths(fleet["srcs"][i])
        assert len(paths) == len(set(paths))
        with _open(fleet["local"][i]) as fs:
            # The bulkstat fields equal the image's own bulkstat records.
            recs = {r.ino: r for r in fs.bulkstat()}
            assert set(got["ino"]) == set(recs)
            for k, path in enumerate(paths):
                r = recs[got["ino"][k]]
                assert fs.lstat(path).st_ino == r.ino
                assert (got["mode"][k], got["size"][k], got["nlink"][k]) == (r.mode, r.size, r.nlink)
                assert (got["uid"][k], got["gid"][k]) == (r.uid, r.gid)
                assert ns_of[k] == (r.atime_ns, r.mtime_ns, r.ctime_ns, r.btime_ns)
                if stat.S_ISREG(r.mode):
                    src = fleet["srcs"][i] / path.lstrip("/")
                    digest = hashlib.sha256(src.read_bytes()).hexdigest()
                    assert got["sha256"][k] == digest
                    assert r.size == src.stat().st_size
                else:
                    assert got["sha256"][k] is None
                assert sorted(got["xattrs"][k]) == sorted(fs.listxattr(path, follow_symlinks=False))
        if i % 4 == 1:
            k = paths.index("/etc/hostname")
            assert "user.fleet" in got["xattrs"][k]
        if i % 2 == 0:
            # A hard link: one row per path, one inode.
            a, b = paths.index("/etc/hostname"), paths.index("/etc/hostname.hard")
            assert got["ino"][a] == got["ino"][b] and got["nlink"][a] == 2
    # Image 5's name that is not UTF-8 keeps its bytes.
    t5 = dataset.filter(ds.field("image") == fleet["sources"][5]).select(["path", "path_bytes"]).to_pydict()
    assert b"/not-utf8-\xfe" in t5["path_bytes"]
    assert "/unicodé" in t5["path"]

    # The damaged image: what its own open and bulkstat give (an error row
    # naming the inode, or rows).
    d = rows[fleet["damaged"]]
    try:
        with _open(fleet["damaged"]) as fs:
            fs.bulkstat_table()
            list(fs.walk("/"))
        own_error = None
    except OSError as e:
        own_error = str(e)
    if own_error is None:
        assert d["ok"], d
    else:
        assert not d["ok"] and own_error in d["error"], (own_error, d)


def test_check(fleet, engine, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "chk"
    summary = xfskit.fleet.check(fleet["sources"], str(out), **engine)
    table = pq.read_table(out / "check.parquet")
    assert table.to_pylist() == summary.to_pylist()
    rows = {r["image"]: r for r in table.to_pylist()}
    problems = pq.read_table(out / "problems.parquet").to_pylist()
    for source, local in zip(fleet["sources"], fleet["local"] + [fleet["damaged"]]):
        r = rows[source]
        assert r["ok"] and r["error"] is None, r
        with _open(local) as fs:
            rep = fs.check()
        assert r["clean"] == rep.clean
        assert r["problems"] == rep.problems_total
        assert r["inodes"] == rep.stats["inodes"]
        mine = [(p["what"], p["where"], p["detail"]) for p in problems if p["image"] == source]
        assert mine == [tuple(p) for p in rep.problems]
        assert [tuple(p.values()) for p in r["first_problems"]] == mine[:5]
        assert r["seconds"] > 0 and r["bytes_read"] > 0
    # The damaged inode is found and named.
    d = rows[fleet["damaged"]]
    assert not d["clean"] and d["problems"] >= 1
    assert all(r["clean"] for s, r in rows.items() if s in fleet["sources"][:N_IMAGES])
    m = rows[fleet["missing"]]
    assert not m["ok"] and m["clean"] is None and m["error"]


def test_find(fleet, engine, tmp_path):
    import pyarrow.parquet as pq

    needle = tmp_path / "needle"
    needle.write_bytes(NEEDLE)
    digest = hashlib.sha256(NEEDLE).hexdigest()
    sources = fleet["sources"][:N_IMAGES] + [fleet["missing"]]

    # By content (a local file: only files of its size are read).
    xfskit.fleet.find(sources, str(tmp_path / "a"), same_as=[str(needle)], **engine)
    found = pq.read_table(tmp_path / "a" / "found.parquet").to_pylist()
    want = [(fleet["sources"][i], "/common/needle.bin") for i in range(0, N_IMAGES, 3)]
    assert sorted((r["image"], r["path"]) for r in found) == sorted(want)
    assert all(r["sha256"] == digest and r["size"] == len(NEEDLE) for r in found)
    imgs = {r["image"]: r for r in pq.read_table(tmp_path / "a" / "images.parquet").to_pylist()}
    assert not imgs[fleet["missing"]]["ok"]

    # By digest (every regular file hashed) and glob together.
    xfskit.fleet.find(sources, str(tmp_path / "b"), sha256=[digest], glob="/common/*", **engine)
    found = pq.read_table(tmp_path / "b" / "found.parquet").to_pylist()
    assert sorted((r["image"], r["path"]) for r in found) == sorted(want)

    # By glob alone: directories, links and files whose path matches.
    xfskit.fleet.find(sources, str(tmp_path / "c"), glob="*/etc/hostname*", **engine)
    found = pq.read_table(tmp_path / "c" / "found.parquet").to_pylist()
    expect = []
    for i in range(N_IMAGES):
        expect.append((fleet["sources"][i], "/etc/hostname"))
        if i % 2 == 0:
            expect.append((fleet["sources"][i], "/etc/hostname.hard"))
    assert sorted((r["image"], r["path"]) for r in found) == sorted(expect)
    for r in found:
        with _open(fleet["local"][fleet["sources"].index(r["image"])]) as fs:
            assert r["ino"] == fs.lstat(r["path"]).st_ino
            assert r["size"] == fs.lstat(r["path"]).st_size


def test_command_line_and_list_file(fleet, tmp_path):
    """`python -m xfskit.fleet` with --local: sources from a list file
    (paths, a JSON line, comments), progress on stderr, and refusal to
    overwrite earlier results."""
    import pyarrow.parquet as pq

    lst = tmp_path / "images.txt"
    lst.write_text(
        "# three images\n"
        f"{fleet['local'][2]}\n"
        "\n"
        + json.dumps({"source": fleet["local"][3]})
        + f"\n{fleet['missing']}\n"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "xfskit.fleet", "check", "--local", "-j", "2", "-f", str(lst), "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[3/3]" in r.stderr and "FAILED" in r.stderr and "2 of 3 images" in r.stderr
    t = pq.read_table(out / "check.parquet").to_pylist()
    assert [x["image"] for x in t] == [fleet["local"][2], fleet["local"][3], fleet["missing"]]
    assert [x["clean"] for x in t] == [True, True, None]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "exists" in r.stderr
    r = subprocess.run(cmd + ["--overwrite", "-q"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == ""
    bad = subprocess.run(
        [sys.executable, "-m", "xfskit.fleet", "find", "--local", fleet["local"][2], "--out", str(tmp_path / "f")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "needs a glob" in bad.stderr


def test_without_ray_names_the_way_out(fleet, tmp_path, monkeypatch):
    """Without Ray installed (simulated), the functions say to install the
    extra or use local=True."""
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("no ray")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(RuntimeError, match=r"xfskit\[fleet\].*local=True"):
        xfskit.fleet.check(fleet["local"][:1], str(tmp_path / "o"), progress=False)


def test_inventory_equals_the_kernel_walk(kernel_image, mounted, engine, tmp_path):
    """An inventory of a kernel-made image (every directory, link and xattr
    format, special files, hard links, names that are not UTF-8) has a row
    for every path of a kernel mount, with the kernel's stat fields,
    xattr names and contents."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _needs_pyarrow()
    out = tmp_path / "inv"
    summary = xfskit.fleet.inventory([str(kernel_image)], str(out), hash="sha256", progress=False, **engine)
    (row,) = summary.to_pylist()
    assert row["ok"], row
    (part,) = list((out / "inventory").iterdir())
    t = pq.read_table(part)
    times = ("atime", "mtime", "ctime", "btime")
    got = t.drop_columns(list(times)).to_pydict()
    mtimes = t["mtime"].cast(pa.int64()).to_pylist()
    rows = {}
    for k in range(t.num_rows):
        p = got["path_bytes"][k] if got["path_bytes"][k] is not None else got["path"][k].encode()
        rows[p] = k
    want = {b"/"}
    root = os.fsencode(mounted)
    for top, dirs, files in os.walk(root):
        for n in dirs + files:
            want.add(top[len(root):] + b"/" + n)
    assert set(rows) == want
    assert t.num_rows == len(want)
    for p, k in rows.items():
        host = root + p if p != b"/" else root
        st = os.lstat(host)
        assert (got["ino"][k], got["mode"][k], got["nlink"][k]) == (st.st_ino, st.st_mode, st.st_nlink), p
        assert (got["uid"][k], got["gid"][k], got["size"][k]) == (st.st_uid, st.st_gid, st.st_size), p
        assert mtimes[k] == st.st_mtime_ns, p
        assert sorted(got["xattrs"][k]) == sorted(os.listxattr(host, follow_symlinks=False)), p
        if stat.S_ISREG(st.st_mode):
            with open(host, "rb") as f:
                assert got["sha256"][k] == hashlib.sha256(f.read()).hexdigest(), p
        else:
            assert got["sha256"][k] is None


def test_s3_images_and_results(s3, tmp_path, monkeypatch):
    """An image in S3 (moto's server) inventoried in place, the results
    written to S3 through pyarrow, read back equal to the local image's."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    _needs_pyarrow()
    img, url, options = s3
    endpoint = options["aws_endpoint"]
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    out = f"s3://images/results?endpoint_override={endpoint}&scheme=http"
    s = xfskit.fleet.inventory([url], out, storage_options=options, local=True, jobs=1, progress=False)
    (row,) = s.to_pylist()
    assert row["ok"], row
    # Fetched in place: a fraction of the object, not all of it.
    assert 0 < row["bytes_read"] < os.path.getsize(img)
    fs, base = pafs.FileSystem.from_uri(out)
    got = ds.dataset(f"{base}/inventory", filesystem=fs).to_table(columns=["path", "ino", "size"])
    local = tmp_path / "local"
    xfskit.fleet.inventory([str(img)], str(local), local=True, jobs=1, progress=False)
    want = ds.dataset(str(local / "inventory")).to_table(columns=["path", "ino", "size"])
    assert sorted(got.to_pylist(), key=str) == sorted(want.to_pylist(), key=str)
    assert got.num_rows == row["rows"] > 300


def _ns_ints(t):
    """The table with its times as int64 nanoseconds (to_pylist would
    turn them into datetimes, which have only microseconds)."""
    import pyarrow as pa

    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type):
            t = t.set_column(i, f.name, t[f.name].cast(pa.int64()))
    return t


def _reference_inventory(fs, image: str, algo: str | None) -> dict:
    """The inventory as one table in memory, built the simple way (every
    path collected first, then the columns): what the streamed file must
    hold, row for row."""
    import pyarrow as pa

    table = _ns_ints(fs.bulkstat_table())
    recs = {r["ino"]: r for r in table.to_pylist()}
    root = fs.lstat("/").st_ino
    paths, inos = [b"/"], [root]
    seen, stack = {root}, [b""]
    while stack:
        d = stack.pop()
        for name, ino, _t in fs._inner.scandir(d or b"/"):
            p = d + b"/" + name
            paths.append(p)
            inos.append(ino)
            if ino in recs and stat.S_ISDIR(recs[ino]["mode"]) and ino not in seen:
                seen.add(ino)
                stack.append(p)
    for ino in recs:
        if ino not in set(inos):
            paths.append(None)
            inos.append(ino)
    first = {}
    for p, ino in zip(paths, inos):
        if p is not None:
            first.setdefault(ino, p)
    out = {"path_bytes": paths, "ino": inos, "xattrs": [], algo: []}
    for ino in inos:
        p = first.get(ino)
        names = []
        if p is not None and recs[ino]["forkoff"]:
            names = [n.decode(errors="backslashreplace") for n in fs._inner.listxattr(p, False)]
        out["xattrs"].append(names)
        digest = None
        if p is not None and stat.S_ISREG(recs[ino]["mode"]):
            digest = hashlib.new(algo, fs.read_bytes(p)).hexdigest()
        out[algo].append(digest)
    for name in table.column_names:
        if name != "ino":
            out[name] = [recs[i][name] for i in inos]
    return out


def test_inventory_in_batches_equals_the_whole(fleet, tmp_path):
    """An inventory written a few rows at a time (many row groups) holds
    the same rows, in the same order, as the inventory built whole."""
    import pyarrow.parquet as pq

    out = tmp_path / "inv"
    images = fleet["local"]
    summary = xfskit.fleet.inventory(
        images, str(out), hash="sha256", local=True, jobs=2, progress=False, batch_rows=7
    )
    files = {img: out / "inventory" / xfskit.fleet._slug(i, img) for i, img in enumerate(images)}
    assert all(summary["ok"].to_pylist())
    for img in images:
        f = pq.ParquetFile(files[img])
        t = _ns_ints(f.read())
        assert f.metadata.num_row_groups == -(-t.num_rows // 7) > 1
        assert max(f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)) == 7
        with _open(img) as fs:
            want = _reference_inventory(fs, img, "sha256")
        got = t.to_pydict()
        assert set(got["image"]) == {img}
        # path_bytes is set only for non-UTF-8 paths; path shows the rest.
        paths = [
            b if b is not None else (p.encode() if p is not None else None)
            for p, b in zip(got["path"], got["path_bytes"])
        ]
        assert paths == want["path_bytes"]
        for name, col in want.items():
            if name != "path_bytes":
                assert got[name] == col, (img, name)
    # A hard link's rows share the digest; an xattr's name is listed.
    cols = ["path", "ino", "sha256", "xattrs"]
    t = pq.read_table(files[images[0]], columns=cols).to_pydict()
    row = {p: k for k, p in enumerate(t["path"])}
    a, b = row["/etc/hostname"], row["/etc/hostname.hard"]
    assert t["ino"][a] == t["ino"][b] and t["sha256"][a] == t["sha256"][b] is not None
    t = pq.read_table(files[images[1]], columns=cols).to_pydict()
    assert t["xattrs"][t["path"].index("/etc/hostname")] == ["user.fleet"]


# The peak is VmHWM (this process image's own high-water mark):
# getrusage's ru_maxrss keeps the parent's peak across fork and exec.
_RSS_SCRIPT = """
import json, sys
import xfskit.fleet
row = xfskit.fleet.run_one(
    "inventory", 0, {"source": sys.argv[1]}, {"out": sys.argv[2], "batch_rows": 4096}
)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"ok": row["ok"], "error": row["error"], "rows": row["rows"],
                  "maxrss_kib": int(hwm.split()[1])}))
"""


def _many_files_image(tmp: Path, n: int) -> Path:
    src = tmp / f"src{n}"
    for d in range(n // 1000):
        sub = src / f"d{d:04d}"
        sub.mkdir(parents=True)
        for j in range(1000):
            # Long names: paths held for the whole walk would show.
            (sub / f"file-with-a-longer-name-{j:06d}").touch()
    img = tmp / f"many{n}.img"
    xfskit.build(src, img)
    shutil.rmtree(src)
    return img


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    """Images of 20k and 200k empty files (1,000 a directory), shared by
    the memory tests."""
    _needs_pyarrow()
    tmp = tmp_path_factory.mktemp("many")
    yield {n: _many_files_image(tmp, n) for n in (20_000, 200_000)}
    shutil.rmtree(tmp, ignore_errors=True)


def test_inventory_memory_is_bounded(many_images, tmp_path):
    """A worker's peak RSS for an image of 200k inodes stays within a few
    tens of MiB of its peak for 20k inodes: the rows go to the file in
    batches, and per inode only the bulkstat columns stay (about 120
    bytes). Holding every path and its row (as a table built whole does)
    takes several hundred bytes per inode more."""
    _needs_pyarrow()

    rss = {}
    for n, img in many_images.items():
        out = tmp_path / f"out{n}"
        (out / "inventory").mkdir(parents=True)
        r = subprocess.run(
            [sys.executable, "-c", _RSS_SCRIPT, str(img), str(out)],
            capture_output=True, text=True, check=True, cwd=tmp_path,
        )
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["ok"], got["error"]
        assert got["rows"] > n
        rss[n] = got["maxrss_kib"]
    grown_mib = (rss[200_000] - rss[20_000]) / 1024
    print(f"peak RSS: {rss[20_000] / 1024:.0f} MiB at 20k inodes, {rss[200_000] / 1024:.0f} MiB at 200k")
    # 180k more inodes at ~120 bytes each (columns) is ~21 MiB, plus the
    # scan's transient copy of them; the whole table in memory would be
    # well over 100 MiB more.
    assert grown_mib < 64, f"peak RSS grew {grown_mib:.0f} MiB for 180k more inodes"


@pytest.fixture
def ray_cluster(tmp_path_factory):
    """A Ray cluster of its own: `ray start --head --block` in a new session
    (so that it and every process it starts can be ended by its process
    group, leaving other Ray instances on the machine alone), a free port,
    a temp dir of its own; yields its address. `ray stop` is not used: it
    stops every Ray instance of the machine."""
    import secrets
    import signal
    import tempfile
    import time

    try:
        import ray  # noqa: F401
    except ImportError:
        record_skip("fleet --address: ray is not installed (pip install 'xfskit[fleet]')")
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        record_skip(f"fleet --address: ray is importable but its command {ray_bin} is missing")
    # A short temp dir: Ray's Unix sockets live under it (108 bytes at most).
    temp = tempfile.mkdtemp(prefix="xr", dir="/tmp")
    log = open(Path(temp) / "start.log", "w+")
    # Token authentication, as a real cluster has it, with a token of its
    # own (the command reaches it through the same variables).
    token = Path(temp) / "token"
    token.write_text(secrets.token_hex(32))
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    # Loopback only: Ray replaces 127.0.0.1 by the machine's address unless
    # it believes it runs on one machine, which this variable (false) says.
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env.pop("RAY_AUTH_TOKEN", None)
    with xfskit.fleet._neutral_cwd():
        proc = subprocess.Popen(
            [str(ray_bin), "start", "--head", "--block", "--port=0", f"--temp-dir={temp}",
             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
    try:
        address_file = Path(temp) / "ray_current_cluster"
        deadline = time.monotonic() + 90
        while not address_file.exists() or not address_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise AssertionError(f"ray start did not come up (exit {proc.poll()}):\n{log.read()}")
            time.sleep(0.2)
        yield address_file.read_text().strip(), env, Path(temp)
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                # The group's other members (raylet, workers) may outlive it.
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline:
                    os.killpg(proc.pid, 0)
                    time.sleep(0.2)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _dataset_rows(out: Path) -> list:
    """Every row of an inventory dataset, times as ns integers, in a fixed
    order (image, then path, then inode)."""
    import pyarrow.dataset as ds

    t = _ns_ints(ds.dataset(str(out / "inventory"), format="parquet").to_table())
    return sorted(t.to_pylist(), key=lambda r: (r["image"], r["path"] or "", r["ino"]))


def _verdicts(out: Path) -> list:
    """images.parquet's image, ok, error and rows; the time an HTTP error
    message quotes ("in 1.25ms") left out."""
    import re

    import pyarrow.parquet as pq

    rows = pq.read_table(out / "images.parquet", columns=["image", "ok", "error", "rows"]).to_pylist()
    for r in rows:
        if r["error"]:
            r["error"] = re.sub(r" in [0-9.]+\S*s\b", "", r["error"])
    return rows


def test_inventory_on_a_ray_cluster_by_address(fleet, ray_cluster, tmp_path):
    """`python -m xfskit.fleet inventory --address ADDR` on a Ray cluster
    started apart from the command (`ray start --head`) gives the rows and
    per-image verdicts of the --local run."""
    import pyarrow.parquet as pq

    address, env, temp = ray_cluster
    assert address.startswith("127.0.0.1:"), address
    sources = [fleet["sources"][i] for i in (0, 1, 2, 5)] + [fleet["damaged"], fleet["missing"]]
    outs = {}
    for how in (["--address", address], ["--local", "-j", "2"]):
        out = tmp_path / how[0].lstrip("-")
        cmd = [sys.executable, "-m", "xfskit.fleet", "inventory", *sources, "--hash", "sha256",
               "--out", str(out), *how]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=240, env=env)
        assert r.returncode == 0, r.stderr
        if how[0] == "--address":
            # The command was a driver of that cluster (not a Ray of its own).
            drivers = list((temp / "session_latest" / "logs").glob("python-core-driver-*"))
            assert drivers, sorted(os.listdir(temp / "session_latest" / "logs"))
        assert f"[{len(sources)}/{len(sources)}]" in r.stderr, r.stderr
        outs[how[0]] = out
    remote, local = outs["--address"], outs["--local"]
    assert _verdicts(remote) == _verdicts(local)
    # Four good images; the damaged one and the missing URL are error rows.
    assert [r["ok"] for r in _verdicts(remote)] == [True] * 4 + [False, False]
    got, want = _dataset_rows(remote), _dataset_rows(local)
    assert got == want
    assert len(got) > 100 and {r["image"] for r in got} >= set(sources[:4])


def _split_tree(root: Path) -> None:
    """Subtrees of several sizes and depths, hard links across them, a
    symlink, xattrs, a big (block format) directory and files at the top."""
    for j in range(30):
        (root / "a" / "x").mkdir(parents=True, exist_ok=True)
        (root / "a" / f"f{j}").write_bytes(f"a{j}".encode() * (j + 1))
        if j < 20:
            (root / "a" / "x" / f"g{j}").write_bytes(f"x{j}".encode())
    for s in range(3):
        d = root / "b" / f"s{s}"
        d.mkdir(parents=True)
        for j in range(100 if s == 1 else 15):
            (d / f"a-somewhat-longer-file-name-{j:04d}").write_bytes(bytes([s, j % 256]) * j)
    deep = root / "d" / "e" / "f" / "g"
    deep.mkdir(parents=True)
    for j in range(25):
        (deep / f"h{j}").write_text(f"deep {j}\n")
    (root / "c").mkdir()
    for j in range(0, 30, 7):
        os.link(root / "a" / f"f{j}", root / "c" / f"link{j}")
    os.link(root / "b" / "s0" / "a-somewhat-longer-file-name-0003", root / "top-link")
    os.symlink("../a/f1", root / "c" / "sym")
    os.setxattr(root / "a" / "f7", "user.split", b"1")
    os.setxattr(root / "b" / "s2", "user.dir", b"2")
    for j in range(4):
        (root / f"top{j}").write_text(str(j))
    # A wide directory of small subdirectories: parts group several.
    for k in range(12):
        (root / "w" / f"k{k:02d}").mkdir(parents=True)
        for j in range(4):
            (root / "w" / f"k{k:02d}" / f"e{j}").write_text(f"{k}.{j}")


@pytest.fixture(scope="module")
def split_image(tmp_path_factory):
    _needs_pyarrow()
    tmp = tmp_path_factory.mktemp("split")
    src = tmp / "src"
    _split_tree(src)
    img = tmp / "split.img"
    xfskit.build(src, img, defaults="6.1")
    return img


def _inventory_rows(out: Path, parts: bool) -> list:
    files = sorted((out / "inventory").iterdir())
    assert files and all(bool(re.search(r"\.p\d{5}\.parquet$", f.name)) == parts for f in files), files
    return _dataset_rows(out)


def test_split_inventory_equals_the_whole(split_image, engine, tmp_path):
    """With --split-inodes smaller than the image, the image's inventory is
    planned, then done by several tasks of subtrees, each its own Parquet
    file; the rows (paths, fields, xattr names, digests of hard links in
    other subtrees) are those of the unsplit run. find is split the same
    way and finds the same files."""
    import pyarrow.parquet as pq

    whole, split = tmp_path / "whole", tmp_path / "split"
    kw = dict(hash="sha256", progress=False, **engine)
    xfskit.fleet.inventory([str(split_image)], str(whole), split_inodes=0, **kw)
    t = xfskit.fleet.inventory([str(split_image)], str(split), split_inodes=20, **kw)
    want, got = _inventory_rows(whole, False), _inventory_rows(split, True)
    assert got == want
    assert len(got) > 200
    rows = t.to_pylist()
    assert all(r["ok"] for r in rows), rows
    # The plan (part 0: no inode is unreached here) and the subtrees.
    assert [r["part"] for r in rows] == list(range(len(rows)))
    assert rows[0]["subtree"] is None and rows[0]["rows"] == 0
    tops = [r["subtree"] for r in rows[1:]]
    assert tops[0] == "/" and "/b/s1" in tops and len(tops) >= 5, tops
    assert any(t.startswith("/w/k") and " and " in t for t in tops), tops
    assert sum(r["rows"] for r in rows) == len(want)
    assert pq.read_table(split / "images.parquet").num_rows == len(rows)
    # Each part's file holds its own rows (no path twice across parts).
    paths = [r["path"] for r in got]
    assert len(paths) == len(set(paths))
    # find, split and whole.
    for how in (dict(glob="*/a/*"), dict(same_as=[str(tmp_path / "needle")])):
        (tmp_path / "needle").write_bytes(b"a7" * 8)
        res = {}
        for n in (0, 20):
            o = tmp_path / f"find{n}-{len(res)}-{'glob' in how}"
            s = xfskit.fleet.find([str(split_image)], str(o), split_inodes=n, progress=False, **how, **engine)
            assert all(s["ok"].to_pylist())
            assert (s.num_rows > 1) == (n > 0)
            res[n] = sorted(map(str, pq.read_table(o / "found.parquet").to_pylist()))
        assert res[0] == res[20] and res[0], how
    # The hard links of /a/f7 in another subtree: found by content too.
    assert sum("/c/link7" in r for r in res[20]) == 1


def _damage_dir_block(img: Path, path: str) -> Path:
    """A copy of the image with a byte of a directory's first block
    flipped (its CRC no longer matches): the directory cannot be listed,
    its inode (and bulkstat) is intact."""
    r = run(["xfs_db", "-r", "-c", f"path {path}", "-c", "bmap", str(img)])
    m = re.search(r"startblock \d+ \((\d+)/(\d+)\)", r.stdout)
    assert m, r.stdout
    with xfskit.open(str(img)) as fs:
        agsize = fs.info["meta_data"]["agsize"]
        bsize = fs.info["data"]["bsize"]
    off = (int(m.group(1)) * agsize + int(m.group(2))) * bsize + 200
    bad = img.with_name("dirdamage.img")
    shutil.copyfile(img, bad)
    with open(bad, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
    return bad


def test_split_part_failure_is_that_parts_row(split_image, tmp_path):
    """A directory that cannot be listed fails the part that holds it (and
    the plan's part: the inodes no path reaches are then unknown); the
    other parts' rows are written."""
    if shutil.which("xfs_db") is None:
        record_skip("split part failure: xfs_db is not installed")
    bad = _damage_dir_block(split_image, "/b/s1")
    with xfskit.open(str(bad)) as fs:
        fs.bulkstat_table()  # intact
        with pytest.raises(OSError) as e:
            fs.listdir("/b/s1")
    out = tmp_path / "out"
    t = xfskit.fleet.inventory([str(bad)], str(out), split_inodes=20, local=True, jobs=2, progress=False)
    rows = t.to_pylist()
    failed = [r for r in rows if not r["ok"]]
    assert [r["part"] for r in failed][0] == 0 and len(failed) == 2, failed
    assert "no path reaches" in failed[0]["error"] and str(e.value) in failed[0]["error"]
    assert str(e.value) in failed[1]["error"]
    # The part holding /b/s1: an ancestor's, or its siblings' group with it.
    assert failed[1]["subtree"].split(" and ")[0] in ("/", "/b", "/b/s0", "/b/s1"), failed[1]
    ok = [r for r in rows if r["ok"]]
    assert len(ok) >= 4
    got = _dataset_rows(out)
    assert len(got) == sum(r["rows"] for r in ok) > 80
    assert not any(r["path"].startswith("/b/s1/") for r in got)
    # No part's unfinished file is left behind.
    assert not [f for f in os.listdir(out / "inventory") if f.endswith(".tmp")]


_FIND_RSS_SCRIPT = """
import json, sys
import xfskit.fleet
row = xfskit.fleet.run_one(
    "find", 0, {"source": sys.argv[1]},
    {"out": sys.argv[2], "glob": "*/d0001/*-00012?"},
)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"ok": row["ok"], "error": row["error"], "found": sorted(f[0] for f in row["extra"]["found"]),
                  "maxrss_kib": int(hwm.split()[1])}))
"""


def test_find_memory_is_bounded(many_images, tmp_path):
    """find's peak RSS for 200k inodes stays within 32 MiB of its peak for
    20k: per inode it keeps five bulkstat columns (27 bytes), read AG by
    AG, not a dict of sizes and a set of directories (which took about 47
    MiB more for those 180k inodes). It finds the files it must."""
    _needs_pyarrow()
    rss = {}
    for n, img in many_images.items():
        r = subprocess.run(
            [sys.executable, "-c", _FIND_RSS_SCRIPT, str(img), str(tmp_path)],
            capture_output=True, text=True, check=True, cwd=tmp_path,
        )
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["ok"], got["error"]
        # The glob's ten files.
        assert got["found"] == [f"/d0001/file-with-a-longer-name-{j:06d}" for j in range(120, 130)]
        rss[n] = got["maxrss_kib"]
    grown_mib = (rss[200_000] - rss[20_000]) / 1024
    print(f"find peak RSS: {rss[20_000] / 1024:.0f} MiB at 20k inodes, {rss[200_000] / 1024:.0f} MiB at 200k")
    assert grown_mib < 32, f"find's peak RSS grew {grown_mib:.0f} MiB for 180k more inodes"
