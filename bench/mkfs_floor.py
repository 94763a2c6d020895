#!/usr/bin/env python3
"""The I/O floor of mkfs on a sparse image file: only the writes, no formatting.

Writes CHUNK bytes (default 24 KiB, what xfskit mkfs writes per AG) every
STRIDE bytes (default 1 TiB, the AG size mkfs picks from 1 PiB up) into a new
sparse file, N times, then fsyncs; prints the time of the writes, of the
fsync and the total. Mode `buf` uses buffered writes from one thread, `dio`
O_DIRECT writes from THREADS threads (default 64), as xfskit mkfs does.
Compare the total with `bench/mkfs.sh` at the same AG count (1 PiB = 1024
AGs): no mkfs can write the same headers faster on that filesystem.

Usage: bench/mkfs_floor.py PATH N [buf|dio] [THREADS] [STRIDE] [CHUNK]
  e.g. bench/mkfs_floor.py /scratch/floor.img 16384 dio
PATH must be on the filesystem bench/mkfs.sh uses (XFS: ext4 caps files at
16 TiB).
"""
import mmap
import os
import sys
import threading
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, n = sys.argv[1], int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "dio"
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    stride = int(sys.argv[5]) if len(sys.argv) > 5 else 1 << 40
    chunk = int(sys.argv[6]) if len(sys.argv) > 6 else 24 << 10
    if mode not in ("buf", "dio"):
        sys.exit("mode is buf or dio")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    flags = os.O_RDWR | os.O_CREAT | (os.O_DIRECT if mode == "dio" else 0)
    fd = os.open(path, flags, 0o644)
    os.ftruncate(fd, n * stride)
    os.sync()
    # An anonymous mapping is page aligned, as O_DIRECT needs.
    buf = mmap.mmap(-1, chunk)
    buf.write(os.urandom(chunk))
    next_ag = iter(range(n))
    lock = threading.Lock()

    def writer():
        while True:
            with lock:
                i = next(next_ag, None)
            if i is None:
                return
            os.pwrite(fd, buf, i * stride)

    t0 = time.time()
    workers = [threading.Thread(target=writer) for _ in range(threads if mode == "dio" else 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    t1 = time.time()
    os.fsync(fd)
    t2 = time.time()
    os.close(fd)
    os.unlink(path)
    print(f"{mode} n={n} writes={t1 - t0:.3f}s fsync={t2 - t1:.3f}s total={t2 - t0:.3f}s")


if __name__ == "__main__":
    main()
