"""Read, write and check XFS filesystem images without mounting them.

``xfskit.open(source)`` returns a :class:`Filesystem` whose methods follow
Python's own file APIs (``os``, ``os.path``, ``io``): code ports by
changing ``os`` to ``fs``. Paths are paths inside the image; a relative
path starts at the image's root, and symbolic links resolve inside the
image. Errors are ``OSError`` subclasses with the errno a kernel mount
gives (``FileNotFoundError``, ``NotADirectoryError``...), and damage is a
:class:`CorruptError` (errno ``EUCLEAN``) that names the structure and
where it is. The engine runs with the GIL released.
"""

from __future__ import annotations

import collections
import errno
import io
import json
import os
import stat as _stat
from typing import Any, Iterator

from . import _xfskit
from ._xfskit import CorruptError, DirEntry, StatResult

__all__ = [
    "open",
    "mkfs",
    "build",
    "recover",
    "repair",
    "undo",
    "Filesystem",
    "DirEntry",
    "StatResult",
    "CorruptError",
    "BulkstatRecord",
    "CheckReport",
    "Problem",
    "DeletedFile",
]

__version__ = "0.1.0"


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The process umask when the package was imported: mkdir, makedirs and
#: new files take their mode bits through it, as the kernel applies it.
UMASK = _read_umask()

BulkstatRecord = collections.namedtuple(  # type: ignore[misc]
    "BulkstatRecord", list(_xfskit.BULKSTAT_FIELDS)
)
BulkstatRecord.__doc__ = (
    "One inode as bulkstat reports it (the kernel's XFS_IOC_BULKSTAT "
    "fields): times are integer nanoseconds since the epoch."
)

Problem = collections.namedtuple("Problem", ["what", "where", "detail"])
Problem.__doc__ = "One inconsistency check found: the structure, where it is, what is wrong."


class CheckReport:
    """The result of :meth:`Filesystem.check`."""

    def __init__(
        self, clean: bool, total: int, problems: list, stats: dict, warnings: list = ()
    ):
        #: True when no problem was found.
        self.clean = clean
        #: Problems found (at most 10,000 are kept; see problems_total).
        self.problems = [Problem(*p) for p in problems]
        #: Problems found in all.
        self.problems_total = total
        #: What was looked at (AGs, inodes, directories...).
        self.stats = stats
        #: What is valid but keeps the filesystem from normal use, in words
        #: (a log below the kernel's minimum size); not problems.
        self.warnings = list(warnings)

    def __bool__(self) -> bool:
        return self.clean

    def __repr__(self) -> str:
        return f"<CheckReport clean={self.clean} problems={self.problems_total}>"


class DeletedFile(dict):
    """One deleted file :meth:`Filesystem.deleted` found: a dict of the
    fields of its record in ``xfskit deleted --json`` (``inode``,
    ``generation``, ``type``, ``uid``, ``gid``, ``projid``, ``atime``,
    ``mtime``, ``ctime`` (the deletion), ``crtime`` as ``{"sec", "nsec"}``,
    ``path``, ``names`` (``dir``, ``name``, ``path``, ``sources``),
    ``extents`` (``offset``, ``start``, ``len`` in blocks, ``unwritten``,
    ``free``), ``mapped_bytes``, ``size``, ``symlink``, ``sources``,
    ``confidence``), equal to that record. It also keeps what the scan
    found, for :meth:`Filesystem.undelete`."""

    def __init__(self, native: Any, fs: "Filesystem"):
        super().__init__(json.loads(native.json()))
        self._native = native
        self._fs = fs

    def __repr__(self) -> str:
        where = self.get("path") or (self["names"][0]["name"] if self.get("names") else None)
        return (
            f"<xfskit.DeletedFile inode={self['inode']} {self['type']} "
            f"{self['confidence']} {where!r}>"
        )


def _enc(path: Any) -> bytes:
    return os.fsencode(os.fspath(path))


def _like(model: Any, b: bytes) -> Any:
    """``b`` as the same kind of path as ``model`` (str or bytes)."""
    return b if isinstance(os.fspath(model), bytes) else os.fsdecode(b)


def _join(top: Any, name: Any) -> Any:
    if isinstance(top, bytes):
        return top + name if top.endswith(b"/") else top + b"/" + name
    return top + name if top.endswith("/") else top + "/" + name


def open(
    source: Any,
    *,
    partition: int | None = None,
    lv: str | None = None,
    writable: bool = False,
    norecovery: bool = False,
    storage_options: dict[str, str] | None = None,
    rtdev: Any = None,
) -> "Filesystem":
    """Opens the XFS filesystem in ``source``.

    ``source`` is a path (an image file or block device: a bare filesystem,
    a GPT or MBR disk, LVM2 volumes, qcow2), a URL of an object in object
    storage or on an HTTP server (``s3://``, ``gs://``, ``az://``,
    ``http(s)://``: read in place by ranged requests, never downloaded
    whole), or a binary file object with ``seek`` and ``read`` (an fsspec
    or obstore file...), read by positional reads. ``partition`` (as
    ``xfskit parts`` numbers them) or ``lv`` ("VG/LV") choose among several
    filesystems. ``writable`` opens it for changes, journaled like the
    CLI's offline edits (paths only; a dirty log is replayed first);
    ``norecovery`` reads a filesystem whose log needs replay as it is on
    disk. ``storage_options`` configure a URL's store (object_store keys
    such as ``aws_access_key_id``, ``aws_endpoint``, ``aws_allow_http``),
    over what the environment gives (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``).
    ``rtdev`` (a path) is the realtime device of a filesystem with a
    realtime section, from which realtime files' data is read (path
    sources only).
    """
    if rtdev is not None and not isinstance(source, (str, bytes, os.PathLike)):
        raise ValueError("a realtime device goes with a path source, not a file object")
    if isinstance(source, str) and _xfskit.is_url(source):
        if writable:
            raise ValueError(f"{source}: images read from a URL are read-only")
        if rtdev is not None:
            raise ValueError(f"{source}: a realtime device goes with a path source, not a URL")
        opts = {str(k): str(v) for k, v in (storage_options or {}).items()}
        inner, notes = _xfskit.open_url(source, opts, partition, lv, norecovery)
        name = source
    elif storage_options:
        raise ValueError("storage_options apply to s3://, gs://, az:// and http(s):// URLs only")
    elif isinstance(source, (str, bytes, os.PathLike)):
        inner, notes = _xfskit.open_path(
            os.fsdecode(source),
            partition,
            lv,
            writable,
            norecovery,
            None if rtdev is None else os.fsdecode(rtdev),
        )
        name = os.fsdecode(source)
    else:
        if writable:
            raise ValueError("a file object source is read-only: give a path to write")
        name = str(getattr(source, "name", None) or getattr(source, "path", None) or repr(source))
        inner, notes = _xfskit.open_fileobj(source, name, partition, lv, norecovery)
    if notes:
        import warnings

        for n in notes:
            warnings.warn(f"xfskit: {name}: {n}", stacklevel=2)
    return Filesystem(inner, name)


def mkfs(
    path: Any,
    size: int | str | None = None,
    *,
    block_size: int | None = None,
    label: str | None = None,
    agcount: int | None = None,
    defaults: str | None = None,
    force: bool = False,
    options: list[str] | tuple[str, ...] = (),
) -> dict:
    """Makes an XFS filesystem in ``path`` as ``xfskit mkfs`` does.

    ``size`` (bytes, or mkfs.xfs text such as "1g") creates or sizes the
    image file (``-d size=``); ``block_size`` is ``-b size=``, ``label``
    ``-L``, ``agcount`` ``-d agcount=``, ``force`` ``-f``; ``defaults``
    picks the feature defaults of an xfsprogs release ("6.1", "6.18"...,
    default 6.18); ``options`` are further mkfs.xfs arguments, e.g.
    ``["-m", "reflink=0", "-i", "size=512"]``. Returns the geometry.
    """
    args: list[str] = []
    d = []
    if size is not None:
        d.append(f"size={size}")
    if agcount is not None:
        d.append(f"agcount={agcount}")
    if d:
        args += ["-d", ",".join(d)]
    if block_size is not None:
        args += ["-b", f"size={block_size}"]
    if label is not None:
        args += ["-L", label]
    if force:
        args.append("-f")
    args += list(options)
    args.append(os.fsdecode(path))
    return _xfskit.mkfs(args, defaults)


def build(
    source: Any,
    image: Any,
    *,
    size: int | str = "auto",
    slack: str = "10%+16m",
    defaults: str | None = None,
    reproducible: bool = False,
    owner: str | None = None,
    options: list[str] | tuple[str, ...] = (),
    jobs: int = 1,
) -> dict:
    """Builds the image file ``image`` from ``source`` (a directory or a tar
    archive, compressed or not) as ``xfskit build`` does.

    ``size`` is "auto" (the contents plus ``slack``) or a size;
    ``defaults`` the xfsprogs feature defaults; ``reproducible`` gives the
    same image for the same input; ``owner`` ("UID:GID") owns every file;
    ``options`` are mkfs.xfs arguments; ``jobs`` engine workers. Returns
    the counts of what was written.
    """
    return _xfskit.build(
        os.fsdecode(source),
        os.fsdecode(image),
        str(size),
        slack,
        defaults,
        reproducible,
        owner,
        list(options),
        jobs,
    )


def recover(image: Any, *, allow_unfinished_intents: bool = False) -> dict:
    """Replays the log of ``image`` in place, as a kernel mount would."""
    return _xfskit.recover(os.fsdecode(image), allow_unfinished_intents)


def repair(
    image: Any,
    *,
    dry_run: bool = False,
    partition: int | None = None,
    lv: str | None = None,
    undo: Any = None,
    zero_log: bool = False,
) -> dict:
    """Repairs the filesystem in ``image`` as ``xfskit repair`` does: a
    dirty log replayed, the check, the fixes xfskit makes, the check again.
    Returns a dict: ``log``, ``log_lost``, ``found`` (problems, in words),
    ``fixes``, ``remaining`` and ``clean``. ``dry_run`` writes nothing;
    ``undo`` names a new undo file for :func:`undo`; ``zero_log`` clears a
    dirty log instead of replaying it, as ``xfs_repair -L`` does
    (``log_lost`` then says what it held: ``transactions``, ``records``,
    ``items``...)."""
    return _xfskit.repair(
        os.fsdecode(image),
        dry_run,
        partition,
        lv,
        None if undo is None else os.fsdecode(undo),
        zero_log,
    )


def undo(undo_file: Any, image: Any, *, partition: int | None = None, lv: str | None = None, force: bool = False) -> dict:
    """Puts back what a command run with an undo file changed in ``image``
    (``xfskit undo``): ``records``, ``bytes`` and ``torn_tail``."""
    return _xfskit.undo(os.fsdecode(undo_file), os.fsdecode(image), partition, lv, force)


class _ScandirIterator:
    def __init__(self, entries: list):
        self._it = iter(entries)

    def __iter__(self) -> "_ScandirIterator":
        return self

    def __next__(self) -> DirEntry:
        return next(self._it)

    def close(self) -> None:
        self._it = iter(())

    def __enter__(self) -> "_ScandirIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FileIO(io.RawIOBase):
    """A file of the image as an unbuffered ``io.RawIOBase`` (seekable,
    with ``readinto``); :meth:`Filesystem.open` wraps it in a buffered
    reader or writer unless ``buffering=0``."""

    def __init__(self, handle: Any, name: Any, mode: str, readable: bool, writable: bool, append: bool):
        super().__init__()
        self._h = handle
        self.name = name
        self.mode = mode
        self._r = readable
        self._w = writable
        self._append = append
        self._pos = 0

    def readable(self) -> bool:
        return self._r

    def writable(self) -> bool:
        return self._w

    def seekable(self) -> bool:
        return True

    def _check_read(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if not self._r:
            raise io.UnsupportedOperation("not readable")

    def readinto(self, b: Any) -> int:
        self._check_read()
        m = memoryview(b).cast("B")
        data = self._h.pread(self._pos, len(m))
        n = len(data)
        m[:n] = data
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        self._check_read()
        if size is None or size < 0:
            return self.readall()
        data = self._h.pread(self._pos, size)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        self._check_read()
        n = max(self._h.size() - self._pos, 0)
        data = self._h.pread(self._pos, n)
        self._pos += len(data)
        return data

    def write(self, b: Any) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if not self._w:
            raise io.UnsupportedOperation("not writable")
        if self._append:
            self._pos = self._h.size()
        data = bytes(b)
        n = self._h.pwrite(self._pos, data)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._h.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise OSError(22, "Invalid argument")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def truncate(self, size: int | None = None) -> int:
        if not self._w:
            raise io.UnsupportedOperation("not writable")
        size = self._pos if size is None else size
        self._h.truncate(size)
        return size

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a file inside an image has no descriptor")

    def flush(self) -> None:
        pass

    def fsync(self) -> None:
        """Makes this file's changes durable in the image's log."""
        self._h.fsync()

    def stat(self) -> StatResult:
        """The file's stat (``os.fstat``)."""
        return self._h.fstat()


class Filesystem:
    """An open XFS filesystem (a context manager: leaving it closes it,
    syncing first when writable)."""

    def __init__(self, inner: Any, name: str):
        self._inner = inner
        self.name = name
        self._info: dict | None = None

    # -- life cycle --------------------------------------------------------
    def __enter__(self) -> "Filesystem":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Syncs a writable filesystem (a clean log) and closes."""
        self._inner.close()

    @property
    def closed(self) -> bool:
        return self._inner.closed

    @property
    def writable(self) -> bool:
        return self._inner.writable

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("rw" if self.writable else "ro")
        return f"<xfskit.Filesystem {self.name!r} {state}>"

    # -- reading -----------------------------------------------------------
    @property
    def info(self) -> dict:
        """The geometry and features as ``xfskit info --json`` prints them."""
        if self._info is None:
            self._info = json.loads(self._inner.info_json())
        return self._info

    def stat(self, path: Any, *, follow_symlinks: bool = True) -> StatResult:
        """As ``os.stat``: symbolic links are followed inside the image."""
        return self._inner.stat(_enc(path), follow_symlinks)

    def lstat(self, path: Any) -> StatResult:
        """As ``os.lstat``."""
        return self._inner.stat(_enc(path), False)

    def scandir(self, path: Any = "/") -> _ScandirIterator:
        """As ``os.scandir``: entries in on-disk order, without . and .."""
        top = os.fspath(path)
        return _ScandirIterator(self._inner.scandir_entries(self, top, _enc(top)))

    def listdir(self, path: Any = "/") -> list:
        """As ``os.listdir``."""
        raw = self._inner.scandir(_enc(path))
        if isinstance(os.fspath(path), bytes):
            return [n for n, _, _ in raw]
        return [os.fsdecode(n) for n, _, _ in raw]

    def walk(
        self, top: Any = "/", topdown: bool = True, onerror: Any = None, followlinks: bool = False
    ) -> Iterator[tuple]:
        """As ``os.walk``: (dirpath, dirnames, filenames) for every directory."""
        stack: list = [os.fspath(top)]
        while stack:
            item = stack.pop()
            if isinstance(item, tuple):
                yield item
                continue
            d = item
            dirs, files, descend = [], [], []
            try:
                it = self.scandir(d)
            except OSError as e:
                if onerror is not None:
                    onerror(e)
                continue
            with it:
                for entry in it:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    if is_dir:
                        dirs.append(entry.name)
                        if followlinks or not entry.is_symlink():
                            descend.append(entry.name)
                    else:
                        files.append(entry.name)
            if topdown:
                yield d, dirs, files
                # As os.walk: names removed from dirs by the caller are not visited.
                keep = set(dirs)
                for name in reversed(descend):
                    if name in keep:
                        stack.append(_join(d, name))
            else:
                stack.append((d, dirs, files))
                for name in reversed(descend):
                    stack.append(_join(d, name))

    def readlink(self, path: Any) -> Any:
        """As ``os.readlink``."""
        return _like(path, self._inner.readlink(_enc(path)))

    def listxattr(self, path: Any, *, follow_symlinks: bool = True) -> list:
        """As ``os.listxattr``: full names ("user.x", "security.selinux",
        "trusted.x", "system.posix_acl_access"...)."""
        return [os.fsdecode(n) for n in self._inner.listxattr(_enc(path), follow_symlinks)]

    def getxattr(self, path: Any, attribute: Any, *, follow_symlinks: bool = True) -> bytes:
        """As ``os.getxattr`` (ACLs in the Linux encoding)."""
        return self._inner.getxattr(_enc(path), _enc(attribute), follow_symlinks)

    def exists(self, path: Any) -> bool:
        """As ``os.path.exists`` (False for a dangling link)."""
        try:
            self.stat(path)
        except (OSError, ValueError):
            if self.closed:
                raise
            return False
        return True

    def lexists(self, path: Any) -> bool:
        """As ``os.path.lexists``."""
        try:
            self.lstat(path)
        except OSError:
            return False
        return True

    def isdir(self, path: Any) -> bool:
        """As ``os.path.isdir``."""
        try:
            return _stat.S_ISDIR(self.stat(path).st_mode)
        except OSError:
            return False

    def isfile(self, path: Any) -> bool:
        """As ``os.path.isfile``."""
        try:
            return _stat.S_ISREG(self.stat(path).st_mode)
        except OSError:
            return False

    def islink(self, path: Any) -> bool:
        """As ``os.path.islink``."""
        try:
            return _stat.S_ISLNK(self.lstat(path).st_mode)
        except OSError:
            return False

    def getsize(self, path: Any) -> int:
        """As ``os.path.getsize``."""
        return self.stat(path).st_size

    def open(
        self,
        path: Any,
        mode: str = "rb",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
    ) -> Any:
        """As the builtin ``open`` for a file of the image.

        Modes "rb" (and "r" for text), and on a writable filesystem "wb",
        "xb", "ab", "r+b", "w+b", "a+b" (and their text forms). Binary
        files are buffered (``io.BufferedReader``/``Writer``/``Random``)
        unless ``buffering=0``, which gives the raw :class:`FileIO`.
        ``path`` may be a :class:`DirEntry` from :meth:`scandir`: on a
        read-only filesystem its inode is opened without a path lookup
        (a symbolic link's entry is followed by its path, as ``os`` does).
        """
        m = set(mode)
        if not m <= set("rwxabt+") or len(m & set("rwxa")) != 1:
            raise ValueError(f"invalid mode: {mode!r}")
        binary = "b" in m
        plus = "+" in m
        p = _enc(path)
        if "r" in m and not plus:
            ino = self._entry_ino(path)
            h = self._inner.open_read(p) if ino is None else self._inner.open_read_ino(ino)
            readable, writable, append = True, False, False
        else:
            create = "r" not in m
            h = self._inner.open_write(
                p, 0o666 & ~UMASK, create, "x" in m, "w" in m
            )
            readable, writable, append = plus or "r" in m, True, "a" in m
        raw = FileIO(h, path, mode, readable, writable, append)
        if buffering == 0:
            if not binary:
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = buffering if buffering > 1 else 128 * 1024
        if readable and writable:
            f: Any = io.BufferedRandom(raw, size)
        elif writable:
            f = io.BufferedWriter(raw, size)
        else:
            f = io.BufferedReader(raw, size)
        if append:
            f.seek(0, io.SEEK_END)
        if binary:
            return f
        return io.TextIOWrapper(f, encoding=encoding, errors=errors, newline=newline)

    def read_bytes(self, path: Any) -> bytes:
        """The whole contents of a file. A :class:`DirEntry` of this
        filesystem's ``scandir`` is read by its inode, as :meth:`open` does."""
        ino = self._entry_ino(path)
        if ino is not None:
            return self._inner.read_file_ino(ino)
        return self._inner.read_file(_enc(path))

    def _entry_ino(self, path: Any) -> int | None:
        """The inode of ``path`` when it is an entry of this filesystem's
        scandir that is not a symbolic link (then opening it needs no path
        lookup), else None. On a writable filesystem the entry may be
        stale: its path is looked up again."""
        if (
            isinstance(path, DirEntry)
            and path._fs is self
            and not self._inner.writable
            and path._ltype() != "l"
        ):
            return path._ino
        return None

    def bulkstat(self, *, ag: int | None = None, threads: int = 0) -> Iterator[BulkstatRecord]:
        """Every allocated inode, from the inode btrees in inode order (no
        tree walk): :class:`BulkstatRecord` s as the scan reads them."""
        for a, b in self._inner.bulkstat(ag, threads):
            yield BulkstatRecord._make(a + b)

    def bulkstat_table(self, *, ag: int | None = None, threads: int = 0) -> Any:
        """Bulkstat as a ``pyarrow.Table`` (one row per inode), built from
        column buffers filled in Rust: no Python object per inode. Times
        are ``timestamp[ns]`` (saturated past the year 2262)."""
        import pyarrow as pa

        rows, cols = self._inner.bulkstat_columns(ag, threads)
        kinds = {
            "u64": pa.uint64(),
            "u32": pa.uint32(),
            "u16": pa.uint16(),
            "ts": pa.timestamp("ns", tz="UTC"),
        }
        names, arrays = [], []
        for name, kind, buf in cols:
            names.append(name)
            arrays.append(pa.Array.from_buffers(kinds[kind], rows, [None, pa.py_buffer(buf)]))
        return pa.Table.from_arrays(arrays, names=names)

    def check(self, *, threads: int = 0, memory: int = 0) -> CheckReport:
        """Checks the whole filesystem read-only, as ``xfskit check``.

        ``memory`` bounds, in bytes, what the check keeps per inode and per
        directory entry (0: the default, 512 MiB), as ``--memory``; past it
        sorted runs go to a temporary file in ``$TMPDIR``.
        """
        return CheckReport(*self._inner.check(threads, memory))

    def extract(
        self,
        dest: Any,
        path: Any = "/",
        *,
        threads: int = 3,
        preserve: bool = True,
        chown: bool | None = None,
        strict: bool = False,
    ) -> dict:
        """Copies ``path`` of the image (a directory's contents, or a file)
        into the host directory ``dest`` as ``xfskit extract`` does: times
        and xattrs kept when ``preserve``, owners when running as root
        (or as ``chown`` says). Entries the image has damaged are skipped
        and listed under "damaged"."""
        return self._inner.extract(os.fsdecode(dest), _enc(path), threads, preserve, chown, strict)

    # -- deleted files -----------------------------------------------------
    def deleted(self, *, quick: bool = False) -> list:
        """The deleted files that can still be recovered, as ``xfskit
        deleted`` finds them: a list of :class:`DeletedFile` (dicts equal to
        the records of ``xfskit deleted --json``). ``quick`` leaves out the
        sweep of free space (``--quick``: no freed inode chunks, no freed
        directory blocks). The image is only read."""
        return [DeletedFile(d, self) for d in self._inner.deleted(quick)]

    def undelete(self, rec: Any, dest: Any) -> int:
        """Writes the recovered data of ``rec`` to the host path ``dest``,
        which must not exist (``FileExistsError``), as ``xfskit undelete``
        writes a file: holes and preallocated extents left sparse, the
        access and modification times set from the inode, the length its
        ``size`` when known, else the end of its last surviving block.
        Returns that length. A symlink's record makes the symlink again
        (returning the target's length); a directory's raises
        ``IsADirectoryError``; a record with no surviving data ``OSError``
        ENODATA.

        ``rec`` is a :class:`DeletedFile` from this filesystem's
        :meth:`deleted`, used as it is; or any mapping with ``"inode"``
        (a line of ``deleted.jsonl``, a fleet row's record) or an inode
        number, which is looked up by a new full scan
        (``FileNotFoundError`` when no deleted file has that number)."""
        native = rec._native if isinstance(rec, DeletedFile) and rec._fs is self else None
        if native is None:
            ino = int(rec) if isinstance(rec, int) else int(rec["inode"])
            native = next((d for d in self._inner.deleted(False) if d.ino == ino), None)
            if native is None:
                raise FileNotFoundError(
                    errno.ENOENT, f"no deleted file has inode {ino} in {self.name}", os.fsdecode(_enc(dest))
                )
        return self._inner.undelete(native, _enc(dest))

    # -- writing -----------------------------------------------------------
    def mkdir(self, path: Any, mode: int = 0o777) -> None:
        """As ``os.mkdir`` (the mode goes through the umask)."""
        self._inner.mkdir(_enc(path), mode & ~UMASK)

    def makedirs(self, name: Any, mode: int = 0o777, exist_ok: bool = False) -> None:
        """As ``os.makedirs``."""
        p = _enc(name).rstrip(b"/")
        head, _, tail = p.rpartition(b"/")
        if head and tail and not self.exists(head):
            try:
                self.makedirs(head, mode, exist_ok=True)
            except FileExistsError:
                pass
        try:
            self.mkdir(p, mode)
        except OSError:
            if not exist_ok or not self.isdir(p):
                raise

    def remove(self, path: Any) -> None:
        """As ``os.remove``."""
        self._inner.remove(_enc(path))

    unlink = remove

    def rmdir(self, path: Any) -> None:
        """As ``os.rmdir``."""
        self._inner.rmdir(_enc(path))

    def rename(self, src: Any, dst: Any) -> None:
        """As ``os.rename`` (replaces a file or empty directory at ``dst``)."""
        self._inner.rename(_enc(src), _enc(dst))

    replace = rename

    def symlink(self, src: Any, dst: Any) -> None:
        """As ``os.symlink``: ``dst`` becomes a link to ``src``."""
        self._inner.symlink(_enc(src), _enc(dst))

    def link(self, src: Any, dst: Any, *, follow_symlinks: bool = True) -> None:
        """As ``os.link``."""
        self._inner.link(_enc(src), _enc(dst), follow_symlinks)

    def chmod(self, path: Any, mode: int, *, follow_symlinks: bool = True) -> None:
        """As ``os.chmod``."""
        self._inner.setattr(_enc(path), follow_symlinks, mode=mode)

    def chown(self, path: Any, uid: int, gid: int, *, follow_symlinks: bool = True) -> None:
        """As ``os.chown`` (-1 leaves the id alone)."""
        self._inner.setattr(
            _enc(path),
            follow_symlinks,
            uid=None if uid == -1 else uid,
            gid=None if gid == -1 else gid,
        )

    def utime(
        self,
        path: Any,
        times: tuple | None = None,
        *,
        ns: tuple | None = None,
        follow_symlinks: bool = True,
    ) -> None:
        """As ``os.utime``: (atime, mtime) in seconds or ``ns=`` in
        nanoseconds; neither sets both to now."""
        if times is not None and ns is not None:
            raise ValueError("utime: you may specify either 'times' or 'ns' but not both")
        if times is not None:
            a, m = (int(round(t * 1e9)) for t in times)
        elif ns is not None:
            a, m = ns
        else:
            a = m = -1
        self._inner.setattr(_enc(path), follow_symlinks, atime_ns=a, mtime_ns=m)

    def truncate(self, path: Any, length: int) -> None:
        """As ``os.truncate``."""
        self._inner.truncate(_enc(path), length)

    def setxattr(
        self, path: Any, attribute: Any, value: bytes, flags: int = 0, *, follow_symlinks: bool = True
    ) -> None:
        """As ``os.setxattr`` (flags ``os.XATTR_CREATE`` / ``os.XATTR_REPLACE``)."""
        self._inner.setxattr(_enc(path), _enc(attribute), bytes(value), flags, follow_symlinks)

    def removexattr(self, path: Any, attribute: Any, *, follow_symlinks: bool = True) -> None:
        """As ``os.removexattr``."""
        self._inner.removexattr(_enc(path), _enc(attribute), follow_symlinks)

    def sync(self) -> None:
        """Writes every change in place and leaves a clean log."""
        self._inner.sync()
