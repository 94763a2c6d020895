"""The "xfs" fsspec protocol: chained URLs and a file object source."""

from __future__ import annotations

import pytest

import xfskit

fsspec = pytest.importorskip("fsspec")


@pytest.fixture(scope="module")
def image(tmp_path_factory, request):
    d = tmp_path_factory.mktemp("fsspec")
    src = d / "src"
    (src / "etc").mkdir(parents=True)
    (src / "etc" / "os-release").write_text("ID=fsspec\n")
    (src / "data").mkdir()
    (src / "data" / "a.csv").write_text("x,y\n1,2\n3,4\n")
    img = d / "img"
    r = xfskit.build(src, img, defaults="6.1", reproducible=True)
    assert r["files"] == 2 and r["dirs"] == 3
    return img


def test_chained_local_url(image):
    with fsspec.open(f"xfs://etc/os-release::file://{image}", "rb") as f:
        assert f.read() == b"ID=fsspec\n"
    fs = fsspec.filesystem("xfs", fo=str(image))
    assert sorted(fs.ls("/", detail=False)) == ["data", "etc"]
    assert fs.info("data/a.csv")["size"] == 12 and fs.isdir("data")
    assert fs.cat("data/a.csv", start=4) == b"1,2\n3,4\n"
    assert fs.find("/") == ["data/a.csv", "etc/os-release"]


def test_chained_through_another_filesystem(image):
    # The image read through fsspec's memory filesystem: a file object source.
    mem = fsspec.filesystem("memory")
    mem.pipe("/images/img", image.read_bytes())
    with fsspec.open("xfs://data/a.csv::memory://images/img", "rt") as f:
        assert f.read().splitlines() == ["x,y", "1,2", "3,4"]
    fs = fsspec.filesystem("xfs", fo="memory://images/img")
    assert fs.cat("etc/os-release") == b"ID=fsspec\n"
