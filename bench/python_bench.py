"""One timed pass of bench/python.sh: walk the image, stat every entry,
read and sha256 every regular file, with one of the Python XFS readers.

Usage: python python_bench.py xfskit|xfskit-paths|dissect|pyfsxfs|tree IMAGE_OR_DIR
       python python_bench.py summary - < JSON lines (the table)
Prints one JSON line: tool, seconds, files, bytes, digest (a sha256 over
the sorted (path, file hash) pairs, so the tools' results can be compared).
"""

import hashlib
import json
import stat
import sys
import time


def run_xfskit(img):
    """As os.scandir code would: each entry's stat (cached, by its inode)
    and its contents read by the entry (its inode, no path lookup)."""
    import xfskit

    out = []
    with xfskit.open(img) as fs:
        stack = ["/"]
        while stack:
            for entry in fs.scandir(stack.pop()):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode):
                    data = fs.read_bytes(entry)
                    out.append((entry.path, hashlib.sha256(data).hexdigest(), st.st_size))
    return out


def run_xfskit_paths(img):
    """As os.walk code would: fs.walk, then fs.lstat and fs.read_bytes by path."""
    import xfskit

    out = []
    with xfskit.open(img) as fs:
        for d, _dirs, files in fs.walk("/"):
            for n in files:
                p = d.rstrip("/") + "/" + n
                st = fs.lstat(p)
                if stat.S_ISREG(st.st_mode):
                    out.append((p, hashlib.sha256(fs.read_bytes(p)).hexdigest(), st.st_size))
    return out


def run_dissect(img):
    from dissect.xfs import XFS

    out = []
    with open(img, "rb") as fh:
        fs = XFS(fh)
        stack = [("", fs.get("/"))]
        while stack:
            d, node = stack.pop()
            for child in node.iterdir():
                name = child.filename
                if name in (".", ".."):
                    continue
                p = d + "/" + name
                mode = child.inode.di_mode  # the stat: the inode is read here
                _ = (child.size, child.mtime_ns)
                if stat.S_ISDIR(mode):
                    stack.append((p, child))
                elif stat.S_ISREG(mode):
                    data = child.open().read()
                    out.append((p, hashlib.sha256(data).hexdigest(), len(data)))
    return out


def run_pyfsxfs(img):
    import pyfsxfs

    out = []
    v = pyfsxfs.volume()
    v.open(img)
    stack = [("", v.get_root_directory())]
    while stack:
        d, entry = stack.pop()
        for child in entry.sub_file_entries:
            p = d + "/" + child.name
            mode = child.file_mode
            _ = (child.size, child.get_modification_time_as_integer())
            if stat.S_ISDIR(mode):
                stack.append((p, child))
            elif stat.S_ISREG(mode):
                data = child.read() if child.size else b""
                out.append((p, hashlib.sha256(data).hexdigest(), len(data)))
    v.close()
    return out


def run_tree(top):
    """A host directory (xfskit extract's output), walked the same way."""
    import os

    out = []
    for d, _dirs, files in os.walk(top):
        for n in files:
            full = os.path.join(d, n)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    data = f.read()
                p = "/" + os.path.relpath(full, top)
                out.append((p, hashlib.sha256(data).hexdigest(), len(data)))
    return out


def summary():
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    base = rows[0]["seconds"]
    print(f"{'tool':<14}{'seconds':>9}{'vs xfskit':>11}{'files':>8}{'MiB':>8}  digest")
    for r in rows:
        extra = f"  (extract {r['extract_seconds']} s)" if "extract_seconds" in r else ""
        print(f"{r['tool']:<14}{r['seconds']:>9.3f}{r['seconds'] / base:>10.2f}x{r['files']:>8}"
              f"{r['bytes'] / 2**20:>8.1f}  {r['digest']}{extra}")
    digests = {r["digest"] for r in rows}
    print("digests agree" if len(digests) == 1 else "DIGESTS DIFFER: " + ", ".join(sorted(digests)))


def main():
    if sys.argv[1] == "summary":
        return summary()
    tool, img = sys.argv[1], sys.argv[2]
    fn = {"xfskit": run_xfskit, "xfskit-paths": run_xfskit_paths, "dissect": run_dissect, "pyfsxfs": run_pyfsxfs, "tree": run_tree}[tool]
    # Imports are not timed (dissect.xfs alone takes a quarter of a second).
    __import__({"xfskit": "xfskit", "xfskit-paths": "xfskit", "dissect": "dissect.xfs", "pyfsxfs": "pyfsxfs", "tree": "os"}[tool])
    t = time.perf_counter()
    out = fn(img)
    secs = time.perf_counter() - t
    h = hashlib.sha256()
    for p, digest, _ in sorted(out):
        h.update(f"{p}\0{digest}\n".encode())
    print(json.dumps({"tool": tool, "seconds": round(secs, 3), "files": len(out),
                      "bytes": sum(s for _, _, s in out), "digest": h.hexdigest()[:16]}))


if __name__ == "__main__":
    main()
