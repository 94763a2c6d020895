"""The ``xfs`` protocol for fsspec: files inside an XFS image.

Registered through the package's ``fsspec.specs`` entry point, so that
once xfskit is installed::

    fsspec.open("xfs://etc/os-release::file:///images/disk.qcow2")
    fsspec.filesystem("xfs", fo="/images/disk.img")
    fsspec.open("xfs://etc/hosts::s3://bucket/disk.img")   # with s3fs

work, and everything built on fsspec (pandas, Dask...) with them. ``fo``
is the image: a path or URL (opened with ``fsspec.open``, chained
protocols included; a local file is opened directly) or a binary file
object. Read-only.
"""

from __future__ import annotations

import stat as _stat
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem

import xfskit


def _kind(mode: int) -> str:
    if _stat.S_ISDIR(mode):
        return "directory"
    if _stat.S_ISREG(mode):
        return "file"
    return "other"


class XfsFileSystem(AbstractFileSystem):
    """Read-only view of the XFS filesystem in an image, for fsspec."""

    protocol = "xfs"
    root_marker = "/"

    def __init__(
        self,
        fo: Any = "",
        target_protocol: str | None = None,
        target_options: dict | None = None,
        partition: int | None = None,
        lv: str | None = None,
        norecovery: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self._of = None
        source: Any = fo
        if isinstance(fo, str):
            of = fsspec.open(fo, mode="rb", protocol=target_protocol, **(target_options or {}))
            if isinstance(of.fs, fsspec.implementations.local.LocalFileSystem):
                source = of.path  # the fast path: the engine reads the file itself
            else:
                self._of = of
                source = of.__enter__()
        self.xfs = xfskit.open(source, partition=partition, lv=lv, norecovery=norecovery)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = super()._strip_protocol(path)
        if isinstance(path, list):
            return path  # type: ignore[return-value]
        return "/" + path.lstrip("/")

    def _entry(self, path: str, st: Any) -> dict:
        kind = _kind(st.st_mode)
        d = {
            "name": path.lstrip("/") or "/",
            "size": st.st_size if kind == "file" else 0,
            "type": kind,
            "mode": st.st_mode,
            "ino": st.st_ino,
            "nlink": st.st_nlink,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "mtime": st.st_mtime,
            "islink": False,
        }
        return d

    def info(self, path: str, **kwargs: Any) -> dict:
        path = self._strip_protocol(path)
        lst = self.xfs.lstat(path)
        if _stat.S_ISLNK(lst.st_mode):
            try:
                st = self.xfs.stat(path)
            except OSError:
                st = lst
            d = self._entry(path, st)
            d["islink"] = True
            d["destination"] = self.xfs.readlink(path)
            return d
        return self._entry(path, lst)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list:
        path = self._strip_protocol(path)
        if not self.xfs.isdir(path):
            info = self.info(path)
            return [info] if detail else [info["name"]]
        out = []
        for e in self.xfs.scandir(path):
            p = e.path
            if detail:
                out.append(self.info(p))
            else:
                out.append(p.lstrip("/"))
        return out

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        if mode != "rb":
            raise NotImplementedError("the xfs protocol is read-only")
        return self.xfs.open(self._strip_protocol(path), "rb")

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        with self.xfs.open(self._strip_protocol(path), "rb") as f:
            if start is not None:
                f.seek(start if start >= 0 else max(f.seek(0, 2) + start, 0))
            if end is None:
                return f.read()
            pos = f.tell()
            if end < 0:
                end = f.seek(0, 2) + end
                f.seek(pos)
            return f.read(max(end - pos, 0))

    def close(self) -> None:
        self.xfs.close()
        if self._of is not None:
            self._of.__exit__(None, None, None)
