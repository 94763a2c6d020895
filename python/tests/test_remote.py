"""Images read in place from object storage: an image served by moto's S3
server on 127.0.0.1 (started here), opened with ``xfskit.open("s3://...",
storage_options=...)``, reads as the local file does, and fetches a
fraction of the image to read one file."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import xfskit
from conftest import record_skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        record_skip("S3 tests: moto[server] and boto3 are not installed")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("moto did not start")
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket="images")
        tmp = tmp_path_factory.mktemp("remote")
        src = tmp / "src"
        (src / "etc").mkdir(parents=True)
        (src / "etc" / "hostname").write_text("py-remote\n")
        (src / "many").mkdir()
        for i in range(300):
            (src / "many" / f"entry-{i:04}").write_text(f"{i}\n" * (i % 7))
        (src / "big").write_bytes(os.urandom(8_000_000))
        raw = tmp / "fs.img"
        xfskit.build(src, raw)
        # qcow2 keeps the object small (moto holds objects in memory; the
        # raw image is 300 MB, sparse).
        if shutil.which("qemu-img") is None:
            record_skip("S3 tests: qemu-img is not installed")
        img = tmp / "fs.qcow2"
        subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(img)], check=True)
        client.upload_file(str(img), "images", "disks/fs.qcow2")
        options = {
            "aws_endpoint": endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }
        yield img, "s3://images/disks/fs.qcow2", options
    finally:
        proc.kill()
        proc.wait()


def _tree(fs) -> list:
    out = []
    for top, dirs, files in fs.walk("/"):
        for name in sorted(dirs + files):
            p = f"{top.rstrip('/')}/{name}"
            st = fs.stat(p, follow_symlinks=False)
            digest = hashlib.sha256(fs.read_bytes(p)).hexdigest() if name in files else None
            out.append((p, st.st_mode, st.st_size, st.st_ino, digest))
    return sorted(out)


def test_s3_reads_equal_the_local_file(s3):
    img, url, options = s3
    with xfskit.open(img) as local, xfskit.open(url, storage_options=options) as remote:
        tree = _tree(local)
        assert len(tree) > 300
        assert _tree(remote) == tree
        assert remote.read_bytes("/etc/hostname") == b"py-remote\n"
        assert remote.check().problems == local.check().problems == []
        assert sorted(r.ino for r in remote.bulkstat()) == sorted(r.ino for r in local.bulkstat())


def test_s3_one_file_fetches_a_fraction(s3):
    img, url, options = s3
    before = xfskit._xfskit.remote_stats()
    with xfskit.open(url, storage_options=options) as fs:
        assert fs.read_bytes("/etc/hostname") == b"py-remote\n"
    after = xfskit._xfskit.remote_stats()
    fetched = after["bytes"] - before["bytes"]
    assert 0 < fetched <= 4 << 20, fetched
    assert fetched < Path(img).stat().st_size // 2


def test_s3_errors(s3):
    img, url, options = s3
    with pytest.raises(FileNotFoundError):
        xfskit.open("s3://images/disks/missing.img", storage_options=options)
    with pytest.raises(ValueError):
        xfskit.open(url, storage_options=options, writable=True)
    with pytest.raises(OSError, match="unknown storage option"):
        xfskit.open(url, storage_options={"no_such_option": "1"})
