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

#: An image with more inodes than this is inventoried (and searched) in
#: several tasks, subtrees of about this many entries each (0: never).
SPLIT_INODES = 1_000_000


def _u_view(table: Any, name: str, code: str) -> memoryview:
    """A column of fixed-width integers as a memoryview (no Python object
    per value): ``code`` is its struct letter (Q, I, H)."""
    arr = table[name].combine_chunks()
    width = {"Q": 8, "I": 4, "H": 2}[code]
    buf = arr.buffers()[1]
    start = arr.offset * width
    return memoryview(buf).cast("B")[start : start + len(arr) * width].cast(code)


class _Cols:
    """One bulkstat table (inodes in increasing order) as column views, and
    a byte per inode: reached by the walk yet. Without ``fields`` only the
    columns the walk reads stay (27 bytes per inode)."""

    def __init__(self, table: Any, fields: bool = True):
        self.fields = table.drop_columns(["ino"]) if fields else None
        self.inos = _u_view(table, "ino", "Q")
        self.modes = _u_view(table, "mode", "H")
        self.nlinks = _u_view(table, "nlink", "I")
        self.forkoffs = _u_view(table, "forkoff", "I")
        self.sizes = _u_view(table, "size", "Q")
        if any(self.inos[i] >= self.inos[i + 1] for i in range(0, len(self.inos) - 1, 4096)):
            raise ValueError("bulkstat did not give the inodes in order")
        self.reached = bytearray(len(self.inos))

    def find(self, ino: int) -> int | None:
        i = bisect.bisect_left(self.inos, ino)
        if i < len(self.inos) and self.inos[i] == ino:
            return i
        return None


class _Lookup:
    """An inode's bulkstat row: from the whole image's table, or (for a
    part of a split image) from its AG's table, read when the walk first
    reaches that AG, so that a part costs the AGs it touches."""

    def __init__(self, fs: xfskit.Filesystem, threads: int, per_ag: bool = False, fields: bool = True):
        self.fs = fs
        self.threads = threads
        self.keep_fields = fields
        self.whole: _Cols | None = None
        self.ags: dict[int, _Cols] = {}
        if per_ag:
            meta = fs.info["meta_data"]
            bsize = fs.info["data"]["bsize"]
            agblklog = (meta["agsize"] - 1).bit_length()
            inopblog = (bsize // meta["isize"]).bit_length() - 1
            self.agshift = agblklog + inopblog
            self.agcount = meta["agcount"]
        else:
            self.whole = _Cols(fs.bulkstat_table(threads=threads), fields)

    def row_of(self, ino: int) -> tuple[_Cols, int] | None:
        cols = self.whole
        if cols is None:
            ag = ino >> self.agshift
            cols = self.ags.get(ag)
            if cols is None:
                if ag >= self.agcount:
                    return None
                cols = self.ags[ag] = _Cols(self.fs.bulkstat_table(ag=ag, threads=self.threads), self.keep_fields)
        i = cols.find(ino)
        return None if i is None else (cols, i)

    def tables(self) -> list[_Cols]:
        return [self.whole] if self.whole is not None else list(self.ags.values())


def _is_dir(ref: tuple[_Cols, int] | None) -> bool:
    return ref is not None and (ref[0].modes[ref[1]] & 0o170000) == _stat.S_IFDIR


def _walk(fs: xfskit.Filesystem, lookup: _Lookup, tops: list[bytes], unit: dict | None) -> Iterator[tuple]:
    """(path, ino, bulkstat row, first reach) of every entry under ``tops``
    (b"" for the root; the tops' own rows are not given), depth first, each
    directory listed once, at its first path. ``unit`` (a part of a split
    image) says which directories other parts list: ``cuts`` (their
    inodes) and ``dup_first`` (a directory with several entries, listed
    under the first of them only), as the plan found them."""
    scandir = fs._inner.scandir
    cuts = set(unit["cuts"]) if unit else ()
    dup_first = unit["dup_first"] if unit else {}
    stack = list(reversed(tops))
    while stack:
        d = stack.pop()
        for name, ino, _t in scandir(d or b"/"):
            p = d + b"/" + name
            ref = lookup.row_of(ino)
            first = ref is not None and not ref[0].reached[ref[1]]
            if ref is not None:
                ref[0].reached[ref[1]] = 1
            yield p, ino, ref, first
            if _is_dir(ref) and ino not in cuts:
                if (dup_first[ino] == p) if ino in dup_first else first:
                    stack.append(p)


def _plan(fs: xfskit.Filesystem, lookup: _Lookup, target: int) -> tuple[list[dict], dict, str | None]:
    """Walks the image's directories as the inventory does (no stat, xattr
    or content) and cuts the tree into subtrees of at least ``target``
    entries, bottom up: a part is a directory's subtree, or several sibling
    subtrees together (a wide directory's small subdirectories). Returns the
    parts (``tops`` paths, their ``inos``, ``entries``; the root's part
    first) and the directories listed under
    their first entry only (inode -> path), and the first directory that
    could not be listed (then the part that holds it fails with that error,
    and the inodes no path reaches are not known). The walk marks every
    inode it reaches in ``lookup``'s table. Per directory it keeps 40
    bytes and its name."""
    from array import array

    root = fs._inner.stat(b"/", False).st_ino
    ref = lookup.row_of(root)
    if ref is not None:
        ref[0].reached[ref[1]] = 1
    d_ino, d_parent, d_own = array("Q", [root]), array("q", [-1]), array("Q", [0])
    # A directory's subdirectories get consecutive numbers: the first, how many.
    d_first, d_kids = array("Q", [0]), array("Q", [0])
    names, name_at = bytearray(), array("Q", [0, 0])
    index_of: dict[int, int] | None = None  # built at the first directory seen twice
    dup_first: dict[int, bytes] = {}

    def path_of(i: int) -> bytes:
        parts = []
        while i > 0:
            parts.append(bytes(names[name_at[i] : name_at[i + 1]]))
            i = d_parent[i]
        return b"/" + b"/".join(reversed(parts)) if parts else b"/"

    scandir = fs._inner.scandir
    stack: list[tuple[bytes, int]] = [(b"", 0)]
    error = None
    while stack:
        d, di = stack.pop()
        n = 0
        d_first[di] = len(d_ino)
        try:
            listing = scandir(d or b"/")
        except OSError as e:
            error = error or f"{type(e).__name__}: {e}"
            listing = []
        for name, ino, _t in listing:
            n += 1
            ref = lookup.row_of(ino)
            first = ref is not None and not ref[0].reached[ref[1]]
            if ref is not None:
                ref[0].reached[ref[1]] = 1
            if not _is_dir(ref):
                continue
            if first:
                d_ino.append(ino)
                d_parent.append(di)
                d_own.append(0)
                d_first.append(0)
                d_kids.append(0)
                names.extend(name)
                name_at.append(len(names))
                if index_of is not None:
                    index_of[ino] = len(d_ino) - 1
                stack.append((d + b"/" + name, len(d_ino) - 1))
            elif ino not in dup_first:
                if index_of is None:
                    index_of = {x: i for i, x in enumerate(d_ino)}
                j = index_of.get(ino)
                if j is not None:
                    dup_first[ino] = path_of(j) if j else b""
        d_own[di] = n
        d_kids[di] = len(d_ino) - d_first[di]
    # Bottom up (a directory comes after its subdirectories): rem is what a
    # directory's subtree holds that no part took yet. Where that reaches
    # `target`, its subdirectories not yet taken are grouped in order into
    # parts of at least `target` entries; then the directory itself (its
    # entries and what is left below it) is one if it still reaches it.
    rem = array("Q", d_own)
    taken = bytearray(len(d_ino))
    groups: list[list[int]] = []
    for i in range(len(d_ino) - 1, -1, -1):
        if rem[i] >= target:
            group, total = [], 0
            for c in range(d_first[i], d_first[i] + d_kids[i]):
                if taken[c]:
                    continue
                group.append(c)
                total += rem[c]
                if total >= target:
                    groups.append(group)
                    for g in group:
                        taken[g] = 1
                    rem[i] -= total
                    group, total = [], 0
            if i and rem[i] >= target:
                groups.append([i])
                taken[i] = 1
        if i and not taken[i]:
            rem[d_parent[i]] += rem[i]
    parts = [{"tops": [b""], "inos": [root], "entries": rem[0]}]
    for group in reversed(groups):
        parts.append(
            {
                "tops": [path_of(c) for c in group],
                "inos": [d_ino[c] for c in group],
                "entries": sum(rem[c] for c in group),
            }
        )
    return parts, dup_first, error


class _Inventory:
    """Writes one image's inventory (or one part's) as the walk goes,
    ``BATCH_ROWS`` rows per row group. Per inode it keeps only the
    bulkstat columns (a few fixed-width numbers) and one byte (reached
    yet); paths, xattr names and digests live only as long as their
    batch."""

    def __init__(self, fs: xfskit.Filesystem, image: str, params: dict, writer_for, lookup: _Lookup | None = None):
        import pyarrow as pa

        self.pa = pa
        self.fs = fs
        self.image = image
        self.xattrs = params.get("xattrs", True)
        self.algo = params.get("hash")
        self.deleted = bool(params.get("deleted"))
        self.batch_rows = int(params.get("batch_rows") or BATCH_ROWS)
        self.lookup = lookup or _Lookup(fs, params.get("threads", 0))
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
        self.b_ref: list = []
        self.b_xattrs: list = []
        self.b_hash: list = []

    def add(self, p: bytes | None, ino: int, ref: tuple | None, first: bool) -> None:
        if p is None:
            self.b_text.append(None)
            self.b_raw.append(None)
        else:
            t, r = _text(p)
            self.b_text.append(t)
            self.b_raw.append(r)
        self.b_ino.append(ino)
        self.b_ref.append(ref)
        if self.xattrs or self.algo:
            names, digest = self._extras(p, ino, ref, first)
            self.b_xattrs.append(names)
            self.b_hash.append(digest)
        if len(self.b_ino) >= self.batch_rows:
            self.flush()

    def _extras(self, p: bytes | None, ino: int, ref: tuple | None, first: bool) -> tuple:
        """The xattr names and the digest of a row (those of the inode's
        first path; none for a row without a path)."""
        if ref is None or p is None:
            return [], None
        if not first:
            got = self.linked.get(ino)
            if got is not None:
                return got
            return [], None  # its first path had nothing to give
        cols, row = ref
        names: list = []
        digest = None
        if self.xattrs and cols.forkoffs[row] != 0:
            names = [n.decode(errors="backslashreplace") for n in self.fs._inner.listxattr(p, False)]
        if self.algo and (cols.modes[row] & 0o170000) == _stat.S_IFREG:
            digest = _hash(self.fs, p, self.algo)
        if cols.nlinks[row] > 1 and (names or digest is not None):
            self.linked[ino] = (names, digest)
        return names, digest

    def _fields(self) -> Any:
        """The bulkstat fields of the batch's rows, in its order (a row
        whose inode bulkstat did not give has nulls)."""
        pa = self.pa
        tabs: dict[int, tuple[_Cols, list]] = {}
        for ref in self.b_ref:
            if ref is not None and id(ref[0]) not in tabs:
                tabs[id(ref[0])] = (ref[0], [])
        if len(tabs) <= 1:
            if not tabs and not self.lookup.tables():
                self.lookup.row_of(0)  # no row of the batch has fields: AG 0's give the schema
            cols = next(iter(tabs.values()))[0] if tabs else self.lookup.tables()[0]
            return cols.fields.take(pa.array([None if r is None else r[1] for r in self.b_ref], pa.int64()))
        # Rows from several AGs' tables: each table's rows, then back in order.
        base, at = {}, 0
        for ref in self.b_ref:
            if ref is not None:
                tabs[id(ref[0])][1].append(ref[1])
        pieces = []
        for key, (cols, idx) in tabs.items():
            base[key] = at
            at += len(idx)
            pieces.append(cols.fields.take(pa.array(idx, pa.int64())))
        seen = dict.fromkeys(tabs, 0)
        order = []
        for ref in self.b_ref:
            if ref is None:
                order.append(None)
            else:
                k = id(ref[0])
                order.append(base[k] + seen[k])
                seen[k] += 1
        return pa.concat_tables(pieces).take(pa.array(order, pa.int64()))

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
        fields = self._fields()
        for name in fields.column_names:
            cols[name] = fields[name]
        if self.deleted:
            cols.update(_DELETED_COLUMNS(pa, [False] * n, [None] * n, [None] * n))
        self._write(pa.table(cols))
        self._clear()

    def _write(self, t: Any) -> None:
        if self.writer is None:
            self.writer = self.writer_for(t.schema)
            self.schema = t.schema
        elif t.schema != self.schema:
            t = t.cast(self.schema)  # the deleted rows' columns built apart
        self.writer.write_table(t, row_group_size=t.num_rows)
        self.rows += t.num_rows

    def deleted_rows(self) -> None:
        """With ``deleted``: a row per full path of each deleted file
        :meth:`Filesystem.deleted` finds (one without a path when none is
        known), marked ``deleted``, with what the freed inode keeps in the
        bulkstat columns and the whole record in ``deleted_record``."""
        if not self.deleted:
            return
        self.flush()
        pa = self.pa
        if not self.lookup.tables():
            self.lookup.row_of(0)  # the bulkstat columns' types
        schema = self.lookup.tables()[0].fields.schema
        recs = self.fs.deleted()
        paths: list = []
        owner: list = []
        for k, r in enumerate(recs):
            full = list(dict.fromkeys(n["path"] for n in r["names"] if n["path"] is not None))
            for p in full or [None]:
                paths.append(p)
                owner.append(k)
        for at in range(0, len(owner), self.batch_rows):
            rows = owner[at : at + self.batch_rows]
            ps = paths[at : at + self.batch_rows]
            n = len(rows)
            raw = [_text(os.fsencode(p)) if p is not None else (None, None) for p in ps]
            cols: dict[str, Any] = {
                "image": pa.array([self.image] * n, pa.string()),
                "path": pa.array([t for t, _ in raw], pa.string()),
                "path_bytes": pa.array([b for _, b in raw], pa.binary()),
                "ino": pa.array([recs[k]["inode"] for k in rows], pa.uint64()),
            }
            if self.xattrs:
                cols["xattrs"] = pa.array([[] for _ in rows], pa.list_(pa.string()))
            if self.algo:
                cols[self.algo] = pa.array([None] * n, pa.string())
            for f in schema:
                vals = [_deleted_field(recs[k], f.name) for k in rows]
                if pa.types.is_timestamp(f.type):
                    cols[f.name] = pa.array(vals, pa.int64()).cast(f.type)
                else:
                    cols[f.name] = pa.array(vals, f.type)
            cols.update(
                _DELETED_COLUMNS(
                    pa,
                    [True] * n,
                    [recs[k]["confidence"] for k in rows],
                    [recs[k]._native.json() for k in rows],
                )
            )
            self._write(pa.table(cols))

    def walk(self, tops: list[bytes], unit: dict | None = None) -> None:
        """The rows of every path under ``tops`` (b"" for the root), and
        with ``unit`` only those of its part."""
        for p, ino, ref, first in _walk(self.fs, self.lookup, tops, unit):
            self.add(p, ino, ref, first)

    def root(self) -> None:
        root = self.fs._inner.stat(b"/", False).st_ino
        ref = self.lookup.row_of(root)
        first = ref is not None and not ref[0].reached[ref[1]]
        if ref is not None:
            ref[0].reached[ref[1]] = 1
        self.add(b"/", root, ref, first)

    def unreached(self) -> None:
        """A row without a path for each inode no path reaches (open but
        unlinked, or lost)."""
        cols = self.lookup.whole
        assert cols is not None
        i = cols.reached.find(0)
        while i != -1:
            self.add(None, cols.inos[i], (cols, i), True)
            i = cols.reached.find(0, i + 1)

    def run(self) -> int:
        """The whole image: every path from the root (each directory listed
        once), then the inodes no path reaches (and with ``deleted`` the
        deleted files). Returns the rows."""
        self.root()
        self.walk([b""])
        self.unreached()
        self.flush()
        self.deleted_rows()
        return self.rows


def _DELETED_COLUMNS(pa: Any, deleted: list, confidence: list, record: list) -> dict:
    """The columns ``deleted=True`` adds to every inventory row."""
    return {
        "deleted": pa.array(deleted, pa.bool_()),
        "confidence": pa.array(confidence, pa.string()),
        "deleted_record": pa.array(record, pa.string()),
    }


#: The type bits of a deleted file's ``mode`` (a freed inode keeps no mode).
_TYPE_BITS = {
    "file": _stat.S_IFREG,
    "dir": _stat.S_IFDIR,
    "symlink": _stat.S_IFLNK,
    "chardev": _stat.S_IFCHR,
    "blockdev": _stat.S_IFBLK,
    "fifo": _stat.S_IFIFO,
    "socket": _stat.S_IFSOCK,
}


def _deleted_field(rec: dict, name: str) -> Any:
    """A bulkstat column of a deleted file's row: what its record keeps
    (owners, generation, times, size when known, surviving extents, the
    type bits of mode), else null."""
    def ns(t: dict) -> int:
        return t["sec"] * 1_000_000_000 + t["nsec"]

    if name in ("uid", "gid", "projid"):
        return rec[name]
    if name == "gen":
        return rec["generation"]
    if name in ("atime", "mtime", "ctime"):
        return ns(rec[name])
    if name == "btime":
        return ns(rec["crtime"])
    if name == "size":
        return rec["size"]
    if name == "extents":
        return len(rec["extents"])
    if name == "nlink":
        return 0
    if name == "mode":
        return _TYPE_BITS.get(rec["type"])
    return None


def _parquet_writer(tmp: str, ofs: Any, writers: list):
    import pyarrow.parquet as pq

    def writer_for(schema):
        w = pq.ParquetWriter(tmp, schema, filesystem=ofs)
        writers.append(w)
        return w

    return writer_for


def _write_inventory(
    fs: xfskit.Filesystem, image: str, params: dict, tmp: str, ofs: Any
) -> tuple[int, list | None, str | None]:
    """Writes the inventory of ``fs`` to ``tmp`` (a path in the pyarrow
    filesystem ``ofs``) in row groups of ``BATCH_ROWS``. An image of more
    than ``split_inodes`` inodes with more than one subtree of that size
    is split instead: this task writes the rows of the inodes no path
    reaches, and returns the parts for other tasks. Returns (rows, parts
    or None, the plan's error: a directory it could not list)."""
    writers: list = []
    unit = params.get("unit")
    try:
        if unit is not None:
            lookup = _Lookup(fs, params.get("threads", 0), per_ag=True)
            inv = _Inventory(fs, image, params, _parquet_writer(tmp, ofs, writers), lookup)
            if b"" in unit["tops"]:
                inv.root()
            inv.walk(unit["tops"], unit)
            inv.flush()
            return inv.rows, None, None
        inv = _Inventory(fs, image, params, _parquet_writer(tmp, ofs, writers))
        split = int(params.get("split_inodes") or 0)
        whole = inv.lookup.whole
        if split and whole is not None and len(whole.inos) > split:
            parts, dup_first, error = _plan(fs, inv.lookup, split)
            if len(parts) > 1:
                if error is None:
                    inv.unreached()
                    inv.flush()
                    inv.deleted_rows()
                return inv.rows, _units(parts, dup_first), error
            whole.reached[:] = bytes(len(whole.reached))
        return inv.run(), None, None
    finally:
        for w in writers:
            w.close()


def _units(parts: list[dict], dup_first: dict) -> list[dict]:
    """What each part's task gets: its top, and the directories listed
    elsewhere (the other parts' tops, and the later entries of directories
    with several)."""
    cuts = sorted(ino for p in parts[1:] for ino in p["inos"])
    return [dict(p, cuts=cuts, dup_first=dup_first) for p in parts]


def _inventory_table(fs: xfskit.Filesystem, image: str, params: dict) -> Any:
    """One image's whole inventory as a table in memory (what its Parquet
    file holds; for small images and tests)."""
    import pyarrow as pa

    batches: list = []

    class _Collect:
        def write_table(self, t, row_group_size=None):
            batches.append(t)

    inv = _Inventory(fs, image, params, lambda schema: _Collect())
    inv.run()
    return pa.concat_tables(batches)


def _slug(index: int, source: str, part: int | None = None) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", source.rstrip("/").rsplit("/", 1)[-1])[:60]
    tail = "" if part is None else f".p{part:05d}"
    return f"{index:06d}-{base or 'image'}{tail}.parquet"


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
    the options of :func:`inventory` (``hash``, ``xattrs``, ``deleted``), :func:`check`
    (``memory``) or :func:`find` (``glob``; ``sha256``: a dict of digest
    to size or None), ``threads`` and ``split_inodes``. Returns the image's
    row (image, ok, error, rows, seconds, bytes_read...) with ``extra``:
    check's problems or find's matches.

    An inventory or find of an image of more than ``split_inodes`` inodes
    is split: this task plans the parts (its row is part 0, with the
    inventory's rows of inodes no path reaches) and ``extra["parts"]``
    holds the params of each part's task (``unit`` and ``part`` added),
    to run with the same ``kind``, ``index`` and ``spec``."""
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
        "part": params.get("part"),
        "subtree": _unit_text(params.get("unit")),
    }
    extra: dict[str, Any] = {}
    tmp = ofs = None
    try:
        with _open(spec) as fs:
            if kind == "inventory":
                ofs, base = _out_fs(params["out"])
                part = params.get("part")
                tmp = f"{base}/inventory/.{_slug(index, spec['source'], part)}.tmp"
                row["rows"], parts, plan_error = _write_inventory(fs, spec["source"], params, tmp, ofs)
                if parts is not None:
                    part = row["part"] = 0
                    extra["parts"] = [dict(params, unit=u, part=k + 1) for k, u in enumerate(parts)]
                name = f"{base}/inventory/{_slug(index, spec['source'], part)}"
                if row["rows"]:
                    ofs.move(tmp, name)
                    row["file"] = name
                tmp = None
                if plan_error is not None:
                    # The other parts run; this one (the inodes no path
                    # reaches) cannot be known.
                    raise _PlanError(plan_error)
            elif kind == "check":
                rep = fs.check(threads=params.get("threads", 0), memory=params.get("memory", 0))
                row["clean"] = rep.clean
                row["problems"] = rep.problems_total
                row["first_problems"] = [tuple(p) for p in rep.problems[:FIRST_PROBLEMS]]
                row["inodes"] = int(rep.stats.get("inodes", 0))
                row["rows"] = 1
                extra["problems"] = [tuple(p) for p in rep.problems]
            elif kind == "find":
                found, parts = _find_in(fs, params)
                row["rows"] = len(found)
                extra["found"] = found
                if parts is not None:
                    row["part"] = 0
                    extra["parts"] = [dict(params, unit=u, part=k + 1) for k, u in enumerate(parts)]
            else:
                raise ValueError(f"unknown scan {kind!r}")
        row["ok"] = True
    except Exception as e:  # one image's failure is its row, never the job's
        row["error"] = f"{type(e).__name__}: {e}"
        if tmp is not None:
            with contextlib.suppress(Exception):
                ofs.delete_file(tmp)
    row["seconds"] = time.monotonic() - t0
    row["bytes_read"] = _read_counter() - read0
    row["extra"] = extra
    return row


class _PlanError(Exception):
    def __str__(self) -> str:
        return f"the inodes no path reaches are not known: {self.args[0]}"


def _unit_text(unit: dict | None) -> str | None:
    if unit is None:
        return None
    tops = unit["tops"]
    more = f" and {len(tops) - 1} more" if len(tops) > 1 else ""
    return _text(tops[0] or b"/")[0] + more


def _find_in(fs: xfskit.Filesystem, params: dict) -> tuple[list[tuple], list | None]:
    """The matches of the image (or of its part ``params["unit"]``), and
    the parts when the image is split (past ``split_inodes`` inodes by the
    superblock's count). Per inode only the five bulkstat columns it reads
    are kept (27 bytes, no Python object; each AG's read when the walk first
    reaches it), and the digests of files with several links (their other
    paths are not read again)."""
    glob = params.get("glob")
    want: dict[str, int | None] = params.get("sha256") or {}
    unit = params.get("unit")
    threads = params.get("threads", 0)
    # Each AG's bulkstat as the walk reaches it, only the columns it reads.
    lookup = _Lookup(fs, threads, per_ag=True, fields=False)
    if unit is None:
        split = int(params.get("split_inodes") or 0)
        counters = fs.info["counters"]
        if split and counters["icount"] - counters["ifree"] > split:
            parts, dup_first, _error = _plan(fs, lookup, split)
            if len(parts) > 1:
                # A directory the plan could not list fails its part.
                return [], _units(parts, dup_first)
            lookup = _Lookup(fs, threads, per_ag=True, fields=False)
    # A digest of a given file comes with its size: only files of that size are read.
    known_sizes = None
    if want and all(s is not None for s in want.values()):
        known_sizes = set(want.values())
    rx = re.compile(fnmatch.translate(glob)) if glob else None
    linked: dict[int, str] = {}
    out: list[tuple] = []

    def consider(p: bytes, ino: int, ref: tuple | None) -> None:
        size = None
        if ref is not None and (ref[0].modes[ref[1]] & 0o170000) == _stat.S_IFREG:
            size = ref[0].sizes[ref[1]]
        elif not rx or want:
            return  # only regular files have contents to match
        text, _raw = _text(p)
        if rx and not rx.match(text):
            return
        digest = None
        if want:
            if known_sizes is not None and size not in known_sizes:
                return
            digest = linked.get(ino)
            if digest is None:
                digest = _hash(fs, p, "sha256")
                if ref[0].nlinks[ref[1]] > 1:
                    linked[ino] = digest
            if digest not in want:
                return
        out.append((text, ino, size, digest))

    tops = unit["tops"] if unit is not None else [b""]
    if b"" in tops:
        root = fs._inner.stat(b"/", False).st_ino
        ref = lookup.row_of(root)
        if ref is not None:
            ref[0].reached[ref[1]] = 1
        consider(b"/", root, ref)
    for p, ino, ref, _first in _walk(fs, lookup, tops, unit):
        consider(p, ino, ref)
    return out, None


# -- running the tasks -------------------------------------------------------


def _progress(done: int, total: int, row: dict) -> None:
    what = "ok" if row["ok"] else f"FAILED {row['error']}"
    part = ""
    if row.get("part") is not None:
        part = f" part {row['part']}" + (f" ({row['subtree']})" if row.get("subtree") else " (plan)")
        if row["extra"].get("parts"):
            what += f", split in {len(row['extra']['parts'])} parts"
    sys.stderr.write(
        f"[{done}/{total}] {row['image']}{part}: {what} ({row['rows']} rows, "
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
        pending = {task.remote(kind, i, s, params): (i, params) for i, s in enumerate(specs)}
        rows: list[tuple] = []
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, p = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except Exception as e:  # the worker died: still one image's (or part's) row
                    row = _failed(specs[i], e, p)
                for more in row["extra"].get("parts", ()):
                    pending[task.remote(kind, i, specs[i], more)] = (i, more)
                rows.append((i, row))
                report(row)
        return _in_order(rows)
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


def _in_order(rows: list[tuple]) -> list[dict]:
    """The rows of the images in the order given, an image's parts in order."""
    rows.sort(key=lambda x: (x[0], x[1].get("part") or 0))
    for _i, r in rows:
        r["extra"].pop("parts", None)
    return [r for _i, r in rows]


def _failed(spec: dict, e: BaseException, params: dict | None = None) -> dict:
    params = params or {}
    return {
        "part": params.get("part"),
        "subtree": _unit_text(params.get("unit")),
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

    rows: list[tuple] = []
    # spawn: the parent may hold threads (the engine's, pyarrow's).
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futs = {pool.submit(run_one, kind, i, s, params): (i, params) for i, s in enumerate(specs)}
        while futs:
            ready, _ = cf.wait(futs, return_when=cf.FIRST_COMPLETED)
            for fut in ready:
                i, p = futs.pop(fut)
                try:
                    row = fut.result()
                except Exception as e:  # the process died: still one image's (or part's) row
                    row = _failed(specs[i], e, p)
                for more in row["extra"].get("parts", ()):
                    futs[pool.submit(run_one, kind, i, specs[i], more)] = (i, more)
                rows.append((i, row))
                report(row)
    return _in_order(rows)


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
    done, total = [0], [len(specs)]

    def report(row: dict) -> None:
        done[0] += 1
        total[0] += len(row["extra"].get("parts", ()))
        if progress:
            _progress(done[0], total[0], row)

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
            "part": pa.array([r.get("part") for r in rows], pa.int64()),
            "subtree": pa.array([r.get("subtree") for r in rows], pa.string()),
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
    deleted: bool = False,
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
    split_inodes: int = SPLIT_INODES,
) -> Any:
    """Writes every path of every image to ``OUT/inventory/`` (one Parquet
    file per image): the image, the path (``path_bytes`` holds it when it
    is not UTF-8), the bulkstat fields (``ino``, ``mode``, ``nlink``,
    ``uid``, ``gid``, ``size``, ``blocks``, the four ``*_ns`` times...), the
    xattr names, and with ``hash`` (a hashlib name such as "sha256") a
    column of that name with each regular file's digest. A hard link gives
    a row per path; an inode no path reaches, a row without one.

    With ``deleted``, the deleted files :meth:`Filesystem.deleted` finds in
    each image are rows too, after the others (part 0's, when split): one
    per full path the evidence gives (one without a path when none is
    known), the path column holding that path. Every row then has three
    more columns: ``deleted`` (True for these rows, False for the others),
    ``confidence`` and ``deleted_record`` (the record of ``xfskit deleted
    --json``, as JSON text); a deleted row's bulkstat columns hold what the
    freed inode keeps (``uid``, ``gid``, ``projid``, ``gen`` as the
    record's ``generation``, the four times, ``size`` when known, ``extents``:
    the surviving ones, ``nlink`` 0, ``mode``: the type bits only), the
    others are null. Without it the output is as before.

    Each task writes its file as the walk goes, ``batch_rows`` rows per
    Parquet row group: besides that batch it keeps about 120 bytes per
    inode of the image (the bulkstat columns and a mark of the inodes
    reached), not the paths.

    An image of more than ``split_inodes`` inodes (0: never) is split: a
    first task walks its directories (no stat, xattr or content read) and
    cuts the tree into subtrees of at least ``split_inodes`` entries, each
    then inventoried by a task of its own into its own Parquet file
    (``INDEX-NAME.pNNNNN.parquet``; part 0 holds the inodes no path
    reaches); a part reads the bulkstat of the AGs its inodes are in. The
    rows are those of the unsplit run; ``images.parquet`` has a row per
    part (``part``, ``subtree``), a failed part's error in its row.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    if split_inodes < 0:
        raise ValueError(f"split_inodes must be 0 (never) or more, not {split_inodes}")
    if hash is not None:
        hashlib.new(hash)  # an unknown name fails here, not in every task
    _prepare_out(out, ["inventory", "images.parquet"], overwrite)
    rows = _run(
        "inventory",
        images,
        out,
        {
            "hash": hash,
            "xattrs": xattrs,
            "deleted": deleted,
            "threads": threads,
            "batch_rows": batch_rows,
            "split_inodes": split_inodes,
        },
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
    split_inodes: int = SPLIT_INODES,
) -> Any:
    """Finds files in every image: those whose absolute path matches
    ``glob`` (``fnmatch`` rules: ``*`` also matches ``/``), and/or regular
    files whose content has one of the ``sha256`` digests or the digest of
    one of the local files ``same_as`` (only files of those files' sizes
    are read). ``OUT/found.parquet``: image, path, ino, size, sha256 (when
    digests were asked). An image of more than ``split_inodes`` inodes is
    searched in parts, as :func:`inventory` splits it.
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
    if split_inodes < 0:
        raise ValueError(f"split_inodes must be 0 (never) or more, not {split_inodes}")
    _prepare_out(out, ["found.parquet", "images.parquet"], overwrite)
    rows = _run(
        "find",
        images,
        out,
        {"glob": glob, "sha256": want, "threads": threads, "split_inodes": split_inodes},
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

    def split(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--split-inodes", type=int, default=SPLIT_INODES, metavar="N",
            help="split an image of more than N inodes into tasks of subtrees of about N "
            f"entries each (0: never; default {SPLIT_INODES:,})",
        )

    inv = sub.add_parser("inventory", help="every path of every image, as a Parquet dataset")
    common(inv)
    inv.add_argument("--hash", help="a hashlib algorithm (sha256...) for every regular file")
    inv.add_argument("--no-xattrs", action="store_true", help="leave out the xattr names")
    inv.add_argument(
        "--deleted", action="store_true",
        help="add a row per deleted file (xfskit deleted), marked in a 'deleted' column",
    )
    split(inv)
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
    split(fnd)
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
            t = inventory(
                images, args.out, hash=args.hash, xattrs=not args.no_xattrs,
                deleted=args.deleted, split_inodes=args.split_inodes, **common,
            )
        elif args.cmd == "check":
            t = check(images, args.out, memory=args.memory, **common)
        else:
            t = find(
                images, args.out, glob=args.glob, sha256=args.sha256, same_as=args.same_as,
                split_inodes=args.split_inodes, **common,
            )
    except (ValueError, RuntimeError, OSError) as e:
        print(f"xfskit.fleet: {e}", file=sys.stderr)
        return 2
    # An image split in parts failed when one of its parts did.
    verdict: dict[str, bool] = {}
    for image, ok in zip(t["image"].to_pylist(), t["ok"].to_pylist()):
        verdict[image] = verdict.get(image, True) and ok
    failed = sum(1 for ok in verdict.values() if not ok)
    if not args.quiet:
        sys.stderr.write(
            f"{len(verdict) - failed} of {len(verdict)} images scanned, {failed} failed "
            f"(their errors are in images.parquet); results in {args.out}\n"
        )
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that tasks name xfskit.fleet's
    # functions (which workers import) rather than this __main__'s.
    from xfskit import fleet as _fleet

    sys.exit(_fleet.main())
