"""Scans of many XFS images at once, one task per image, on Ray.

Three scans, each a command (``python -m xfskit.fleet inventory|check|find``)
and a function of this module:

- :func:`inventory`: one row per path of every image (the bulkstat fields,
  the path, the xattr names and, when asked, a content hash), written as a
  Parquet dataset with one file per image under ``OUT/inventory/``;
- :func:`check`: one row per image with :meth:`Filesystem.check`'s verdict
  (``OUT/check.parquet``) and every problem found (``OUT/problems.parquet``);
- :func:`find`: the files whose path matches a glob and/or whose content
  has a given SHA-256 (``OUT/found.parquet``).

Each image is opened by the task that scans it (a path every worker can
read, or a URL read in place): no image bytes go through Ray. An image that
cannot be opened or read becomes a row with its error in
``OUT/images.parquet``; the other images go on. Progress goes to stderr.

Without ``address`` the tasks run on a local Ray instance (``ray.init()``
on this machine); with ``address="ray://host:10001"`` (or ``"auto"``) on
that cluster, whose workers need this package installed and the images
and ``OUT`` reachable (a shared filesystem, or URLs). ``local=True`` (the
command's ``--local``) runs them in a pool of processes on this machine
instead and needs no Ray.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import stat as _stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import xfskit

__all__ = ["Source", "read_sources", "inventory", "check", "find", "run_one", "sha256_of", "main"]

#: Problems of one image kept in its check.parquet row (all of them go to
#: problems.parquet, up to the 10,000 check keeps).
FIRST_PROBLEMS = 5


@dataclass
class Source:
    """One image to scan: a path or URL, and how to open it."""

    source: str
    partition: int | None = None
    lv: str | None = None
    storage_options: dict[str, str] | None = field(default=None)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "partition": self.partition,
            "lv": self.lv,
            "storage_options": self.storage_options,
        }


def _as_source(item: Any, partition: int | None, lv: str | None, opts: dict | None) -> Source:
    if isinstance(item, Source):
        return item
    if isinstance(item, dict):
        unknown = set(item) - {"source", "partition", "lv", "storage_options"}
        if unknown or "source" not in item:
            raise ValueError(
                f"an image line must be a path, a URL or a JSON object with \"source\" "
                f"(and \"partition\", \"lv\", \"storage_options\"): {json.dumps(item)}"
            )
        return Source(
            str(item["source"]),
            item.get("partition", partition),
            item.get("lv", lv),
            item.get("storage_options", opts),
        )
    s = os.fspath(item)
    s = os.fsdecode(s)
    return Source(s, partition, lv, opts)


def read_sources(lines: Iterable[str]) -> list[Any]:
    """Image sources from the lines of a list: a path or URL per line, or a
    JSON object (``{"source": ..., "partition": 2, "lv": "vg/root",
    "storage_options": {...}}``); blank lines and lines starting with ``#``
    are skipped."""
    out: list[Any] = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"line {n}: not JSON: {e}") from None
        else:
            out.append(line)
    return out


def _sources(
    images: Iterable[Any],
    partition: int | None = None,
    lv: str | None = None,
    storage_options: dict | None = None,
) -> list[Source]:
    out = []
    for item in images:
        s = _as_source(item, partition, lv, storage_options)
        if not xfskit._xfskit.is_url(s.source):
            # Workers may start elsewhere: give them an absolute path.
            s = Source(os.path.abspath(s.source), s.partition, s.lv, s.storage_options)
        out.append(s)
    if not out:
        raise ValueError("no images given")
    return out


# -- the work of one task (runs in a Ray worker or a pool process) -----------


def _open(spec: dict) -> xfskit.Filesystem:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xfskit.open(
            spec["source"],
            partition=spec.get("partition"),
            lv=spec.get("lv"),
            storage_options=spec.get("storage_options"),
        )


def _read_counter() -> int:
    """Bytes this process has read so far: from files (/proc/self/io's
    rchar) and from object storage or HTTP (the remote device's count)."""
    n = 0
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    n += int(line.split()[1])
    except OSError:
        pass
    return n + int(xfskit._xfskit.remote_stats()["bytes"])


def _dirs_and_sizes(table: Any) -> tuple[set, dict]:
    """The directory inodes and the regular files' sizes of a bulkstat table."""
    import pyarrow.compute as pc

    fmt = pc.bit_wise_and(table["mode"], 0o170000)
    dirs = pc.filter(table["ino"], pc.equal(fmt, _stat.S_IFDIR)).to_pylist()
    reg = pc.equal(fmt, _stat.S_IFREG)
    sizes = dict(
        zip(
            pc.filter(table["ino"], reg).to_pylist(),
            pc.filter(table["size"], reg).to_pylist(),
        )
    )
    return set(dirs), sizes


def _paths(fs: xfskit.Filesystem, root_ino: int, dirs: set) -> Iterator[tuple[bytes, int]]:
    """Every (path, inode) reachable from the root, directories by the
    bulkstat table (so no stat per entry), each directory listed once."""
    yield b"/", root_ino
    seen = {root_ino}
    stack = [b""]
    inner = fs._inner
    while stack:
        d = stack.pop()
        for name, ino, _t in inner.scandir(d or b"/"):
            p = d + b"/" + name
            yield p, ino
            if ino in dirs and ino not in seen:
                seen.add(ino)
                stack.append(p)


def _hash(fs: xfskit.Filesystem, path: bytes, algo: str) -> str:
    h = hashlib.new(algo)
    with fs.open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _text(p: bytes) -> tuple[str, bytes | None]:
    """A path as text, and its bytes when they are not UTF-8 (then the text
    shows the bad bytes as \\xNN)."""
    try:
        return p.decode(), None
    except UnicodeDecodeError:
        return p.decode(errors="backslashreplace"), p


#: Rows of an inventory written to its Parquet file at a time (one row
#: group each): what the task holds at once besides the bulkstat columns.
BATCH_ROWS = 65536


def _u_view(table: Any, name: str, code: str) -> memoryview:
    """A column of fixed-width integers as a memoryview (no Python object
    per value): ``code`` is its struct letter (Q, I, H)."""
    arr = table[name].combine_chunks()
    width = {"Q": 8, "I": 4, "H": 2}[code]
    buf = arr.buffers()[1]
    start = arr.offset * width
    return memoryview(buf).cast("B")[start : start + len(arr) * width].cast(code)


class _Inventory:
    """Writes one image's inventory as the walk goes, ``BATCH_ROWS`` rows
    per row group. Per inode it keeps only the bulkstat columns (a few
    fixed-width numbers) and one byte (reached yet); paths, xattr names and
    digests live only as long as their batch."""

    def __init__(self, fs: xfskit.Filesystem, image: str, params: dict, writer_for):
        import pyarrow as pa

        self.pa = pa
        self.fs = fs
        self.image = image
        self.xattrs = params.get("xattrs", True)
        self.algo = params.get("hash")
        self.batch_rows = int(params.get("batch_rows") or BATCH_ROWS)
        table = fs.bulkstat_table(threads=params.get("threads", 0))
        # Bulkstat gives inodes in increasing order: a row is found by bisection.
        self.fields = table.drop_columns(["ino"])
        self.inos = _u_view(table, "ino", "Q")
        self.modes = _u_view(table, "mode", "H")
        self.nlinks = _u_view(table, "nlink", "I")
        self.forkoffs = _u_view(table, "forkoff", "I")
        if any(self.inos[i] >= self.inos[i + 1] for i in range(0, len(self.inos) - 1, 4096)):
            raise ValueError("bulkstat did not give the inodes in order")
        self.reached = bytearray(len(self.inos))
        # Digests and xattr names of inodes with several links, so that
        # their later paths repeat the first one's without a second read.
        self.linked: dict[int, tuple] = {}
        self.writer_for = writer_for
        self.writer = None
        self.rows = 0
        self._clear()

    def _clear(self) -> None:
        self.b_text: list = []
        self.b_raw: list = []
        self.b_ino: list = []
        self.b_row: list = []
        self.b_xattrs: list = []
        self.b_hash: list = []

    def row_of(self, ino: int) -> int | None:
        i = bisect.bisect_left(self.inos, ino)
        if i < len(self.inos) and self.inos[i] == ino:
            return i
        return None

    def add(self, p: bytes | None, ino: int, row: int | None) -> None:
        first = row is not None and not self.reached[row]
        if row is not None:
            self.reached[row] = 1
        if p is None:
            self.b_text.append(None)
            self.b_raw.append(None)
        else:
            t, r = _text(p)
            self.b_text.append(t)
            self.b_raw.append(r)
        self.b_ino.append(ino)
        self.b_row.append(row)
        if self.xattrs or self.algo:
            names, digest = self._extras(p, ino, row, first)
            self.b_xattrs.append(names)
            self.b_hash.append(digest)
        if len(self.b_ino) >= self.batch_rows:
            self.flush()

    def _extras(self, p: bytes | None, ino: int, row: int | None, first: bool) -> tuple:
        """The xattr names and the digest of a row (those of the inode's
        first path; none for a row without a path)."""
        if row is None or p is None:
            return [], None
        if not first:
            got = self.linked.get(ino)
            if got is not None:
                return got
            return [], None  # its first path had nothing to give
        names: list = []
        digest = None
        if self.xattrs and self.forkoffs[row] != 0:
            names = [n.decode(errors="backslashreplace") for n in self.fs._inner.listxattr(p, False)]
        if self.algo and (self.modes[row] & 0o170000) == _stat.S_IFREG:
            digest = _hash(self.fs, p, self.algo)
        if self.nlinks[row] > 1 and (names or digest is not None):
            self.linked[ino] = (names, digest)
        return names, digest

    def flush(self) -> None:
        if not self.b_ino:
            return
        pa = self.pa
        n = len(self.b_ino)
        cols: dict[str, Any] = {
            "image": pa.array([self.image] * n, pa.string()),
            "path": pa.array(self.b_text, pa.string()),
            "path_bytes": pa.array(self.b_raw, pa.binary()),
            "ino": pa.array(self.b_ino, pa.uint64()),
        }
        if self.xattrs:
            cols["xattrs"] = pa.array(self.b_xattrs, pa.list_(pa.string()))
        if self.algo:
            cols[self.algo] = pa.array(self.b_hash, pa.string())
        # Each row takes its inode's bulkstat fields (walk order kept).
        fields = self.fields.take(pa.array(self.b_row, pa.int64()))
        for name in fields.column_names:
            cols[name] = fields[name]
        t = pa.table(cols)
        if self.writer is None:
            self.writer = self.writer_for(t.schema)
        self.writer.write_table(t, row_group_size=n)
        self.rows += n
        self._clear()

    def run(self, root_ino: int) -> int:
        """Walks every path from the root (each directory listed once),
        then gives the inodes no path reaches (open but unlinked, lost) a
        row without a path. Returns the number of rows."""
        scandir = self.fs._inner.scandir
        root_row = self.row_of(root_ino)
        self.add(b"/", root_ino, root_row)
        stack = [b""]
        while stack:
            d = stack.pop()
            for name, ino, _t in scandir(d or b"/"):
                p = d + b"/" + name
                row = self.row_of(ino)
                seen = row is None or self.reached[row]
                self.add(p, ino, row)
                if not seen and (self.modes[row] & 0o170000) == _stat.S_IFDIR:
                    stack.append(p)
        i = self.reached.find(0)
        while i != -1:
            self.add(None, self.inos[i], i)
            i = self.reached.find(0, i + 1)
        self.flush()
        return self.rows


def _write_inventory(fs: xfskit.Filesystem, image: str, params: dict, tmp: str, ofs: Any) -> int:
    """Writes the inventory of ``fs`` to ``tmp`` (a path in the pyarrow
    filesystem ``ofs``) in row groups of ``BATCH_ROWS``; returns its rows."""
    import pyarrow.parquet as pq

    writers: list = []

    def writer_for(schema):
        w = pq.ParquetWriter(tmp, schema, filesystem=ofs)
        writers.append(w)
        return w

    inv = _Inventory(fs, image, params, writer_for)
    try:
        return inv.run(fs._inner.stat(b"/", False).st_ino)
    finally:
        for w in writers:
            w.close()


def _inventory_table(fs: xfskit.Filesystem, image: str, params: dict) -> Any:
    """One image's whole inventory as a table in memory (what its Parquet
    file holds; for small images and tests)."""
    import pyarrow as pa

    batches: list = []

    class _Collect:
        def write_table(self, t, row_group_size=None):
            batches.append(t)

    inv = _Inventory(fs, image, params, lambda schema: _Collect())
    inv.run(fs._inner.stat(b"/", False).st_ino)
    return pa.concat_tables(batches)


def _slug(index: int, source: str) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", source.rstrip("/").rsplit("/", 1)[-1])[:60]
    return f"{index:06d}-{base or 'image'}.parquet"


def _out_fs(out: str) -> tuple[Any, str]:
    """A pyarrow filesystem and the base path for an output directory (a
    local directory, or a URL such as s3://bucket/prefix)."""
    import pyarrow.fs as pafs

    if "://" in out:
        return pafs.FileSystem.from_uri(out)
    return pafs.LocalFileSystem(), os.path.abspath(out)


def run_one(kind: str, index: int, spec: dict, params: dict) -> dict:
    """One image's task, for running on any engine; never raises (a failure
    is the row's ``error``).

    ``kind`` is "inventory", "check" or "find"; ``index`` numbers the
    image's Parquet file; ``spec`` has ``source`` (and ``partition``,
    ``lv``, ``storage_options``); ``params`` has ``out`` (inventory writes
    ``OUT/inventory/INDEX-NAME.parquet``, a directory that must exist) and
    the options of :func:`inventory` (``hash``, ``xattrs``), :func:`check`
    (``memory``) or :func:`find` (``glob``; ``sha256``: a dict of digest
    to size or None), and ``threads``. Returns the image's row (image,
    ok, error, rows, seconds, bytes_read...) with ``extra``: check's
    problems or find's matches."""
    # Imported before the count starts: module loading reads files too.
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    t0 = time.monotonic()
    read0 = _read_counter()
    row: dict[str, Any] = {
        "image": spec["source"],
        "partition": spec.get("partition"),
        "lv": spec.get("lv"),
        "ok": False,
        "error": None,
        "rows": 0,
        "seconds": 0.0,
        "bytes_read": 0,
    }
    extra: dict[str, Any] = {}
    try:
        with _open(spec) as fs:
            if kind == "inventory":
                ofs, base = _out_fs(params["out"])
                name = f"{base}/inventory/{_slug(index, spec['source'])}"
                tmp = f"{base}/inventory/.{_slug(index, spec['source'])}.tmp"
                row["rows"] = _write_inventory(fs, spec["source"], params, tmp, ofs)
                ofs.move(tmp, name)
                row["file"] = name
            elif kind == "check":
                rep = fs.check(threads=params.get("threads", 0), memory=params.get("memory", 0))
                row["clean"] = rep.clean
                row["problems"] = rep.problems_total
                row["first_problems"] = [tuple(p) for p in rep.problems[:FIRST_PROBLEMS]]
                row["inodes"] = int(rep.stats.get("inodes", 0))
                row["rows"] = 1
                extra["problems"] = [tuple(p) for p in rep.problems]
            elif kind == "find":
                found = _find_in(fs, params)
                row["rows"] = len(found)
                extra["found"] = found
            else:
                raise ValueError(f"unknown scan {kind!r}")
        row["ok"] = True
    except Exception as e:  # one image's failure is its row, never the job's
        row["error"] = f"{type(e).__name__}: {e}"
    row["seconds"] = time.monotonic() - t0
    row["bytes_read"] = _read_counter() - read0
    row["extra"] = extra
    return row


def _find_in(fs: xfskit.Filesystem, params: dict) -> list[tuple]:
    glob = params.get("glob")
    want: dict[str, int | None] = params.get("sha256") or {}
    table = fs.bulkstat_table(threads=params.get("threads", 0))
    dirs, sizes = _dirs_and_sizes(table)
    root = fs._inner.stat(b"/", False).st_ino
    # A digest of a given file comes with its size: only files of that size are read.
    known_sizes = None
    if want and all(s is not None for s in want.values()):
        known_sizes = set(want.values())
    rx = re.compile(fnmatch.translate(glob)) if glob else None
    hashed: dict[int, str] = {}
    out = []
    for p, ino in _paths(fs, root, dirs):
        size = sizes.get(ino)
        if size is None:
            if not rx or want:
                continue  # only regular files have contents to match
        text, _raw = _text(p)
        if rx and not rx.match(text):
            continue
        digest = None
        if want:
            if known_sizes is not None and size not in known_sizes:
                continue
            if ino not in hashed:
                hashed[ino] = _hash(fs, p, "sha256")
            digest = hashed[ino]
            if digest not in want:
                continue
        out.append((text, ino, size, digest))
    return out


# -- running the tasks -------------------------------------------------------


def _progress(done: int, total: int, row: dict) -> None:
    what = "ok" if row["ok"] else f"FAILED {row['error']}"
    sys.stderr.write(
        f"[{done}/{total}] {row['image']}: {what} ({row['rows']} rows, "
        f"{row['seconds']:.2f} s, {row['bytes_read']:,} bytes read)\n"
    )
    sys.stderr.flush()


def _run_ray(kind, specs, params, address, num_cpus, report) -> list[dict]:
    import ray

    started = False
    if not ray.is_initialized():
        import logging

        kw: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        with _neutral_cwd():
            if address:
                ray.init(address=address, **kw)
            else:
                ray.init(num_cpus=num_cpus, **kw)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        pending = {task.remote(kind, i, s, params): i for i, s in enumerate(specs)}
        rows: list[dict | None] = [None] * len(specs)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except Exception as e:  # the worker died: still one image's row
                    row = _failed(specs[i], e)
                rows[i] = row
                report(row)
        return [r for r in rows if r is not None]
    finally:
        if started:
            ray.shutdown()


@contextlib.contextmanager
def _neutral_cwd() -> Iterator[None]:
    """Ray puts the driver's working directory first on its workers' path:
    from a directory holding another ``xfskit`` (a source checkout's
    python/, without the native module) the workers would import that one.
    Then Ray starts from the installed package's directory instead."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(xfskit.__file__)))
    cwd = os.getcwd()
    if os.path.exists(os.path.join(cwd, "xfskit")) and os.path.realpath(cwd) != os.path.realpath(here):
        os.chdir(here)
        try:
            yield
        finally:
            os.chdir(cwd)
    else:
        yield


def _failed(spec: dict, e: BaseException) -> dict:
    return {
        "image": spec["source"],
        "partition": spec.get("partition"),
        "lv": spec.get("lv"),
        "ok": False,
        "error": f"{type(e).__name__}: {e}",
        "rows": 0,
        "seconds": 0.0,
        "bytes_read": 0,
        "extra": {},
    }


def _run_local(kind, specs, params, jobs, report) -> list[dict]:
    import concurrent.futures as cf
    import multiprocessing as mp

    rows: list[dict | None] = [None] * len(specs)
    # spawn: the parent may hold threads (the engine's, pyarrow's).
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futs = {pool.submit(run_one, kind, i, s, params): i for i, s in enumerate(specs)}
        for fut in cf.as_completed(futs):
            i = futs[fut]
            try:
                row = fut.result()
            except Exception as e:  # the process died: still one image's row
                row = _failed(specs[i], e)
            rows[i] = row
            report(row)
    return [r for r in rows if r is not None]


def _run(
    kind: str,
    images: Iterable[Any],
    out: str,
    params: dict,
    *,
    partition: int | None,
    lv: str | None,
    storage_options: dict | None,
    address: str | None,
    local: bool,
    jobs: int | None,
    progress: bool,
) -> list[dict]:
    specs = [s.to_dict() for s in _sources(images, partition, lv, storage_options)]
    params = dict(params, out=out)
    jobs = jobs or os.cpu_count() or 1
    total = len(specs)
    done = [0]

    def report(row: dict) -> None:
        done[0] += 1
        if progress:
            _progress(done[0], total, row)

    if local:
        return _run_local(kind, specs, params, jobs, report)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "Ray is not installed: pip install 'xfskit[fleet]', or run with local=True "
            "(--local) for a process pool on this machine"
        ) from None
    return _run_ray(kind, specs, params, address, jobs, report)


def _prepare_out(out: str, names: list[str], overwrite: bool) -> None:
    ofs, base = _out_fs(out)
    import pyarrow.fs as pafs

    for n in names:
        info = ofs.get_file_info(f"{base}/{n}")
        if info.type == pafs.FileType.NotFound:
            continue
        if not overwrite:
            raise FileExistsError(f"{base}/{n} exists: choose another output or overwrite it")
        if info.type == pafs.FileType.Directory:
            ofs.delete_dir(f"{base}/{n}")
        else:
            ofs.delete_file(f"{base}/{n}")
    ofs.create_dir(f"{base}/inventory" if "inventory" in names else base, recursive=True)


def _write(out: str, name: str, table: Any) -> str:
    import pyarrow.parquet as pq

    ofs, base = _out_fs(out)
    path = f"{base}/{name}"
    pq.write_table(table, path, filesystem=ofs)
    return path


def _images_table(rows: list[dict]) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "image": pa.array([r["image"] for r in rows], pa.string()),
            "partition": pa.array([r["partition"] for r in rows], pa.int64()),
            "lv": pa.array([r["lv"] for r in rows], pa.string()),
            "ok": pa.array([r["ok"] for r in rows], pa.bool_()),
            "error": pa.array([r["error"] for r in rows], pa.string()),
            "rows": pa.array([r["rows"] for r in rows], pa.int64()),
            "seconds": pa.array([r["seconds"] for r in rows], pa.float64()),
            "bytes_read": pa.array([r["bytes_read"] for r in rows], pa.int64()),
        }
    )


_COMMON_DOC = """
    ``images`` are paths or URLs (or :class:`Source` objects, or dicts with
    ``source``, ``partition``, ``lv``, ``storage_options``); ``partition``,
    ``lv`` and ``storage_options`` apply to those that do not say. ``out``
    is a directory (or a URL pyarrow writes to, e.g. ``s3://bucket/prefix``);
    what it would replace is refused unless ``overwrite``. ``address`` is a
    Ray cluster (default: a local Ray instance of ``jobs`` CPUs);
    ``local=True`` uses a process pool of ``jobs`` processes instead of Ray.
    ``threads`` are the engine's threads per image (0: its default).
    Returns the per-image table (``OUT/images.parquet``).
"""


def inventory(
    images: Iterable[Any],
    out: str,
    *,
    hash: str | None = None,
    xattrs: bool = True,
    partition: int | None = None,
    lv: str | None = None,
    storage_options: dict | None = None,
    address: str | None = None,
    local: bool = False,
    jobs: int | None = None,
    threads: int = 0,
    overwrite: bool = False,
    progress: bool = True,
    batch_rows: int = BATCH_ROWS,
) -> Any:
    """Writes every path of every image to ``OUT/inventory/`` (one Parquet
    file per image): the image, the path (``path_bytes`` holds it when it
    is not UTF-8), the bulkstat fields (``ino``, ``mode``, ``nlink``,
    ``uid``, ``gid``, ``size``, ``blocks``, the four ``*_ns`` times...), the
    xattr names, and with ``hash`` (a hashlib name such as "sha256") a
    column of that name with each regular file's digest. A hard link gives
    a row per path; an inode no path reaches, a row without one.

    Each task writes its file as the walk goes, ``batch_rows`` rows per
    Parquet row group: besides that batch it keeps about 120 bytes per
    inode of the image (the bulkstat columns and a mark of the inodes
    reached), not the paths.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    if hash is not None:
        hashlib.new(hash)  # an unknown name fails here, not in every task
    _prepare_out(out, ["inventory", "images.parquet"], overwrite)
    rows = _run(
        "inventory",
        images,
        out,
        {"hash": hash, "xattrs": xattrs, "threads": threads, "batch_rows": batch_rows},
        partition=partition,
        lv=lv,
        storage_options=storage_options,
        address=address,
        local=local,
        jobs=jobs,
        progress=progress,
    )
    t = _images_table(rows)
    _write(out, "images.parquet", t)
    return t


inventory.__doc__ = (inventory.__doc__ or "") + _COMMON_DOC


def check(
    images: Iterable[Any],
    out: str,
    *,
    memory: int = 0,
    partition: int | None = None,
    lv: str | None = None,
    storage_options: dict | None = None,
    address: str | None = None,
    local: bool = False,
    jobs: int | None = None,
    threads: int = 0,
    overwrite: bool = False,
    progress: bool = True,
) -> Any:
    """Checks every image (:meth:`Filesystem.check`): ``OUT/check.parquet``
    has one row per image (``clean``, ``problems``, the first problems,
    ``inodes``, ``seconds``, ``bytes_read``, ``error`` when it could not be
    checked), ``OUT/problems.parquet`` one row per problem (image, what,
    where, detail). ``memory`` is check's memory bound per image.
    """
    import pyarrow as pa

    _prepare_out(out, ["check.parquet", "problems.parquet", "images.parquet"], overwrite)
    rows = _run(
        "check",
        images,
        out,
        {"memory": memory, "threads": threads},
        partition=partition,
        lv=lv,
        storage_options=storage_options,
        address=address,
        local=local,
        jobs=jobs,
        progress=progress,
    )
    prob = pa.struct([("what", pa.string()), ("where", pa.string()), ("detail", pa.string())])
    t = _images_table(rows)
    t = t.append_column("clean", pa.array([r.get("clean") for r in rows], pa.bool_()))
    t = t.append_column("problems", pa.array([r.get("problems") for r in rows], pa.int64()))
    t = t.append_column(
        "first_problems",
        pa.array(
            [
                [dict(zip(("what", "where", "detail"), p)) for p in r.get("first_problems", [])]
                for r in rows
            ],
            pa.list_(prob),
        ),
    )
    t = t.append_column("inodes", pa.array([r.get("inodes") for r in rows], pa.int64()))
    images_, what, where, detail = [], [], [], []
    for r in rows:
        for p in r["extra"].get("problems", []):
            images_.append(r["image"])
            what.append(p[0])
            where.append(p[1])
            detail.append(p[2])
    problems = pa.table(
        {
            "image": pa.array(images_, pa.string()),
            "what": pa.array(what, pa.string()),
            "where": pa.array(where, pa.string()),
            "detail": pa.array(detail, pa.string()),
        }
    )
    _write(out, "check.parquet", t)
    _write(out, "problems.parquet", problems)
    _write(out, "images.parquet", _images_table(rows))
    return t


check.__doc__ = (check.__doc__ or "") + _COMMON_DOC


def sha256_of(path: str) -> tuple[str, int]:
    """The SHA-256 and size of a local file (what :func:`find` looks for)."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
    return h.hexdigest(), n


def find(
    images: Iterable[Any],
    out: str,
    *,
    glob: str | None = None,
    sha256: Iterable[str] = (),
    same_as: Iterable[str] = (),
    partition: int | None = None,
    lv: str | None = None,
    storage_options: dict | None = None,
    address: str | None = None,
    local: bool = False,
    jobs: int | None = None,
    threads: int = 0,
    overwrite: bool = False,
    progress: bool = True,
) -> Any:
    """Finds files in every image: those whose absolute path matches
    ``glob`` (``fnmatch`` rules: ``*`` also matches ``/``), and/or regular
    files whose content has one of the ``sha256`` digests or the digest of
    one of the local files ``same_as`` (only files of those files' sizes
    are read). ``OUT/found.parquet``: image, path, ino, size, sha256 (when
    digests were asked).
    """
    import pyarrow as pa

    want: dict[str, int | None] = {}
    for d in sha256:
        d = d.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", d):
            raise ValueError(f"not a SHA-256 digest: {d!r}")
        want[d] = None
    for p in same_as:
        d, n = sha256_of(p)
        if d not in want:
            want[d] = n
    if glob is None and not want:
        raise ValueError("find needs a glob, a digest or a file to match")
    _prepare_out(out, ["found.parquet", "images.parquet"], overwrite)
    rows = _run(
        "find",
        images,
        out,
        {"glob": glob, "sha256": want, "threads": threads},
        partition=partition,
        lv=lv,
        storage_options=storage_options,
        address=address,
        local=local,
        jobs=jobs,
        progress=progress,
    )
    cols: dict[str, list] = {"image": [], "path": [], "ino": [], "size": [], "sha256": []}
    for r in rows:
        for text, ino, size, digest in r["extra"].get("found", []):
            cols["image"].append(r["image"])
            cols["path"].append(text)
            cols["ino"].append(ino)
            cols["size"].append(size)
            cols["sha256"].append(digest)
    t = pa.table(
        {
            "image": pa.array(cols["image"], pa.string()),
            "path": pa.array(cols["path"], pa.string()),
            "ino": pa.array(cols["ino"], pa.uint64()),
            "size": pa.array(cols["size"], pa.uint64()),
            "sha256": pa.array(cols["sha256"], pa.string()),
        }
    )
    _write(out, "found.parquet", t)
    images_t = _images_table(rows)
    _write(out, "images.parquet", images_t)
    return images_t


find.__doc__ = (find.__doc__ or "") + _COMMON_DOC


# -- the command ---------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m xfskit.fleet",
        description="Scan many XFS images (paths or s3://, gs://, az://, http(s):// URLs), "
        "one task per image, on Ray (a local instance, or --address) or with --local "
        "on a process pool; results as Parquet under --out.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("images", nargs="*", help="image paths or URLs")
        sp.add_argument(
            "-f", "--from", dest="from_file", action="append", default=[],
            help="a file listing images, one per line (a path, a URL or a JSON object "
            "with source, partition, lv, storage_options); - reads stdin",
        )
        sp.add_argument("--out", required=True, help="output directory (or URL)")
        sp.add_argument("--overwrite", action="store_true", help="replace earlier results in --out")
        sp.add_argument("--partition", type=int, help="partition number, for every image")
        sp.add_argument("--lv", help="LVM volume VG/LV, for every image")
        sp.add_argument(
            "--storage-option", action="append", default=[], metavar="KEY=VALUE",
            help="an object store option for URLs (e.g. aws_endpoint=http://...)",
        )
        sp.add_argument("--address", help="Ray cluster address (default: a local Ray instance)")
        sp.add_argument("--local", action="store_true", help="a process pool on this machine, no Ray")
        sp.add_argument("-j", "--jobs", type=int, help="images scanned at once on this machine")
        sp.add_argument("--threads", type=int, default=0, help="engine threads per image (0: default)")
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    inv = sub.add_parser("inventory", help="every path of every image, as a Parquet dataset")
    common(inv)
    inv.add_argument("--hash", help="a hashlib algorithm (sha256...) for every regular file")
    inv.add_argument("--no-xattrs", action="store_true", help="leave out the xattr names")
    chk = sub.add_parser("check", help="check every image: one row per image, and the problems")
    common(chk)
    chk.add_argument("--memory", type=int, default=0, help="check's memory bound per image, bytes")
    fnd = sub.add_parser("find", help="files by path glob and/or content SHA-256")
    common(fnd)
    fnd.add_argument("--glob", help="a glob of absolute paths in the image (* matches / too)")
    fnd.add_argument("--sha256", action="append", default=[], help="a content digest (hex)")
    fnd.add_argument(
        "--same-as", action="append", default=[], metavar="FILE",
        help="a local file whose content to look for",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    images: list[Any] = list(args.images)
    for f in args.from_file:
        if f == "-":
            images += read_sources(sys.stdin)
        else:
            with open(f) as fh:
                images += read_sources(fh)
    opts = {}
    for kv in args.storage_option:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"--storage-option {kv!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        opts[k] = v
    common = dict(
        partition=args.partition,
        lv=args.lv,
        storage_options=opts or None,
        address=args.address,
        local=args.local,
        jobs=args.jobs,
        threads=args.threads,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    try:
        if args.cmd == "inventory":
            t = inventory(images, args.out, hash=args.hash, xattrs=not args.no_xattrs, **common)
        elif args.cmd == "check":
            t = check(images, args.out, memory=args.memory, **common)
        else:
            t = find(images, args.out, glob=args.glob, sha256=args.sha256, same_as=args.same_as, **common)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"xfskit.fleet: {e}", file=sys.stderr)
        return 2
    failed = sum(1 for ok in t["ok"].to_pylist() if not ok)
    if not args.quiet:
        sys.stderr.write(
            f"{t.num_rows - failed} of {t.num_rows} images scanned, {failed} failed "
            f"(their errors are in images.parquet); results in {args.out}\n"
        )
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that tasks name xfskit.fleet's
    # functions (which workers import) rather than this __main__'s.
    from xfskit import fleet as _fleet

    sys.exit(_fleet.main())
