#!/usr/bin/env python3
"""The cold read floor of a sparse image file: every allocated byte, read once.

Finds the allocated ranges of IMAGE (SEEK_DATA / SEEK_HOLE), drops the page
cache (root), then reads all of them in PIECE-byte reads (default 1 MiB) from
THREADS threads (default 8), and prints the bytes and the time. Mode `dio`
reads with O_DIRECT into page-aligned buffers (the disk's best: large reads,
several in flight, no page cache); `buf` reads through the page cache with
the same pieces and threads. No tool that must look at every allocated byte
(a check of an image whose inodes and directories fill it) can read them
faster than `dio` does on this disk.

Usage: bench/read_floor.py IMAGE [dio|buf] [THREADS] [PIECE]
"""
import mmap
import os
import sys
import threading
import time


def ranges(fd, size):
    """The allocated (offset, length) ranges of the file."""
    out, off = [], 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end - start))
        off = end
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else "dio"
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    piece = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 20
    if mode not in ("buf", "dio"):
        sys.exit("mode is buf or dio")
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pieces = []
    for start, length in ranges(fd, size):
        for o in range(start, start + length, piece):
            pieces.append((o, min(piece, start + length - o)))
    os.close(fd)
    if os.geteuid() == 0:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    flags = os.O_RDONLY | (os.O_DIRECT if mode == "dio" else 0)
    fd = os.open(path, flags)
    lock = threading.Lock()
    nxt = [0]
    done = [0]

    def worker():
        buf = mmap.mmap(-1, piece)  # page-aligned, as O_DIRECT needs
        got = 0
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(pieces):
                break
            o, n = pieces[i]
            # O_DIRECT lengths must be sector multiples: round up (the
            # allocated ranges are block-aligned in practice).
            want = (n + 511) // 512 * 512 if mode == "dio" else n
            got += os.preadv(fd, [memoryview(buf)[:want]], o)
        with lock:
            done[0] += got

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.monotonic() - t0
    total = sum(n for _, n in pieces)
    print(f"{mode}: {total / 1e6:.0f} MB allocated in {len(pieces)} reads of up to "
          f"{piece >> 10} KiB, {threads} threads: {dt:.3f} s ({total / 1e6 / dt:.0f} MB/s)")


if __name__ == "__main__":
    main()
