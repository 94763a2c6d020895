"""Helper of bench/fleet.sh: one way of taking the inventory of the images
listed in a file, timed; prints one JSON line (seconds, rows)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time


def summary() -> None:
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    counts = {r["rows"] for r in rows}
    assert len(counts) == 1 and all(r["ok"] for r in rows), f"the ways disagree: {rows}"
    ref = next(r for r in rows if r["how"] == "ray2")["seconds"]
    print("| way | seconds | paths/s | time vs ray2 |")
    print("|---|---|---|---|")
    for r in rows:
        init = r.get("ray_init_seconds")
        extra = f" (+ ray.init {init:.2f})" if init is not None else ""
        print(
            f"| {r['how']} | {r['seconds']:.2f}{extra} | {r['rows'] / r['seconds']:,.0f} "
            f"| {r['seconds'] / ref:.2f}x |"
        )
    print(f"paths per way: {counts.pop():,}")


def main() -> None:
    if sys.argv[1] == "summary":
        summary()
        return
    how, listing, out = sys.argv[1], sys.argv[2], sys.argv[3]
    images = [line.strip() for line in open(listing) if line.strip()]
    shutil.rmtree(out, ignore_errors=True)
    import pyarrow  # noqa: F401  (imports are not timed)
    import pyarrow.parquet as pq
    import xfskit
    import xfskit.fleet as fleet

    extra = {}
    if how.startswith("ray"):
        import ray

        jobs = int(how[3:])
        t0 = time.monotonic()
        with fleet._neutral_cwd():
            ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
        extra["ray_init_seconds"] = round(time.monotonic() - t0, 3)
        t1 = time.monotonic()
        s = fleet.inventory(images, out, jobs=jobs, progress=False)
        seconds = time.monotonic() - t1
        ray.shutdown()
        rows = sum(s["rows"].to_pylist())
        ok = all(s["ok"].to_pylist())
    elif how.startswith("local"):
        jobs = int(how[5:])
        t0 = time.monotonic()
        s = fleet.inventory(images, out, jobs=jobs, local=True, progress=False)
        seconds = time.monotonic() - t0
        rows = sum(s["rows"].to_pylist())
        ok = all(s["ok"].to_pylist())
    elif how == "loop":
        # The same per-image work, one image after another in this process.
        os.makedirs(f"{out}/inventory")
        t0 = time.monotonic()
        rows, ok = 0, True
        for i, img in enumerate(images):
            r = fleet.run_one("inventory", i, {"source": img}, {"out": out, "xattrs": True})
            rows += r["rows"]
            ok = ok and r["ok"]
        seconds = time.monotonic() - t0
    elif how == "oswalk":
        # What code written for `os` does once ported to the package: walk,
        # lstat and listxattr of every path, rows into a Parquet file per image.
        os.makedirs(out)
        t0 = time.monotonic()
        rows, ok = 0, True
        for i, img in enumerate(images):
            cols = {k: [] for k in ("path", "ino", "mode", "nlink", "uid", "gid", "size", "mtime_ns", "xattrs")}
            with xfskit.open(img) as fs:
                def add(p):
                    st = fs.lstat(p)
                    for k, v in (("path", p), ("ino", st.st_ino), ("mode", st.st_mode), ("nlink", st.st_nlink),
                                 ("uid", st.st_uid), ("gid", st.st_gid), ("size", st.st_size),
                                 ("mtime_ns", st.st_mtime_ns), ("xattrs", fs.listxattr(p, follow_symlinks=False))):
                        cols[k].append(v)
                add("/")
                for top, dirs, files in fs.walk("/"):
                    for n in dirs + files:
                        add(top.rstrip("/") + "/" + n)
            import pyarrow as pa

            pq.write_table(pa.table({**cols, "image": [img] * len(cols["path"])}), f"{out}/{i:06d}.parquet")
            rows += len(cols["path"])
        seconds = time.monotonic() - t0
    else:
        raise SystemExit(f"unknown way {how}")
    print(json.dumps({"how": how, "seconds": round(seconds, 3), "rows": rows, "ok": ok, **extra}))


if __name__ == "__main__":
    main()
