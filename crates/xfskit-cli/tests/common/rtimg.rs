//! Realtime images for the tests (classic realtime sections and realtime
//! groups): mkfs.xfs 6.15 with `-r rtdev=FILE` and a protofile of empty
//! files (neither mkfs.xfs nor this kernel writes realtime data), then each
//! made a realtime file with xfs_db (flag, size, extent records in
//! realtime blocks), its data written to the realtime device where those
//! blocks are, and `xfs_repair -r` run to make the bitmaps, summaries,
//! free count (and realtime rmap and refcount btrees) agree;
//! `xfs_repair -n -r` then proves the image valid.

use super::fixtures::output_text;
use super::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

pub fn tool(x615: &Path, name: &str) -> Command {
    let mut c = Command::new(x615.join("libexec").join(name));
    c.env("LD_LIBRARY_PATH", x615.join("lib"));
    c
}

pub fn run_ok(c: &mut Command, what: &str) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `name = value` lines of xfs_db's print, as numbers.
pub fn field(out: &str, name: &str) -> u64 {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name} = ")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {out}"))
}

/// Deterministic bytes (xorshift), so a misplaced block shows.
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub const BS: u64 = 4096;

/// One realtime file: (file block, realtime block, blocks, unwritten).
pub struct RtFile {
    pub name: &'static str,
    pub size: u64,
    pub extents: Vec<(u64, u64, u64, bool)>,
}

/// A realtime image and what its files hold.
pub struct RtImage {
    _tmp: TempDir,
    pub img: PathBuf,
    pub rtdev: PathBuf,
    /// (path in the image, contents).
    pub files: Vec<(String, Vec<u8>)>,
    pub x615: PathBuf,
    pub dir: PathBuf,
}

impl RtImage {
    pub fn repair_n(&self) -> (bool, String) {
        let mut c = tool(&self.x615, "xfs_repair");
        c.arg("-n");
        if self.rtdev != self.img {
            c.arg("-r").arg(&self.rtdev);
        }
        let o = c.arg(&self.img).output().expect("xfs_repair -n");
        (o.status.success(), output_text(&o))
    }

    /// Every file reads back as made through `cat --rtdev` and `extract
    /// --rtdev` (into `dir/out`, returned); without the device, `cat` of
    /// `path` exits 3 and says it needs it.
    pub fn assert_files_read_with_rtdev(&self, path: &str) -> PathBuf {
        let xfskit = super::fixtures::xfskit_output;
        let (img, rtdev) = (s(&self.img), s(&self.rtdev));
        for (path, want) in &self.files {
            let o = xfskit(&["cat", "--rtdev", rtdev, img, path]);
            assert!(o.status.success(), "cat {path}: {}", output_text(&o));
            assert!(o.stdout == *want, "cat {path}: the bytes differ");
        }
        let o = xfskit(&["cat", img, path]);
        assert_eq!(o.status.code(), Some(3), "{}", output_text(&o));
        assert!(output_text(&o).contains("needs the realtime device: --rtdev"));
        let dest = self.dir.join("out");
        let o = xfskit(&["extract", "-q", "--rtdev", rtdev, img, s(&dest)]);
        assert_eq!(o.status.code(), Some(0), "extract: {}", output_text(&o));
        for (path, want) in &self.files {
            let got = std::fs::read(dest.join(&path[1..])).expect("extracted");
            assert!(got == *want, "extract {path}: the bytes differ");
        }
        dest
    }

    /// `xfskit info` prints what xfs_db 6.15's `info` prints, with the
    /// realtime device named and without it; that output contains `has`.
    pub fn assert_info_equals_xfs_db(&self, has: &str) {
        for with in [true, false] {
            let mut db = tool(&self.x615, "xfs_db");
            db.arg("-r");
            let mut args = vec!["info"];
            if with {
                db.arg("-R").arg(&self.rtdev);
                args.extend(["--rtdev", s(&self.rtdev)]);
            }
            let want = run_ok(db.args(["-c", "info"]).arg(&self.img), "xfs_db info");
            args.push(s(&self.img));
            let o = super::fixtures::xfskit_output(&args);
            assert!(o.status.success(), "info: {}", output_text(&o));
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                want,
                "info vs xfs_db (-R: {with})"
            );
            assert!(want.contains(has), "{want}");
        }
    }

    /// Mounts the image read-only through `xfskit mount --rtdev` and
    /// checks that every file reads back as made; the mount must exit
    /// cleanly when terminated.
    pub fn assert_read_through_read_only_mount(&self) {
        let dir = self.dir.join("mnt");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["mount", "--read-only", "--rtdev"])
            .arg(&self.rtdev)
            .arg(&self.img)
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("xfskit mount");
        let t0 = std::time::Instant::now();
        while !is_mounted(&dir) {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("xfskit mount exited early: {st}");
            }
            if t0.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                panic!("the FUSE mount did not appear within 20 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let got: Vec<(String, std::io::Result<Vec<u8>>)> = self
            .files
            .iter()
            .map(|(p, _)| (p.clone(), std::fs::read(dir.join(&p[1..]))))
            .collect();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let st = child.wait().expect("wait");
        for ((path, want), (_, got)) in self.files.iter().zip(got) {
            let got = got.unwrap_or_else(|e| panic!("read {path} through the mount: {e}"));
            assert!(got == *want, "{path} through the mount: the bytes differ");
        }
        assert!(st.success(), "xfskit mount exited with {st}");
    }
}

/// The realtime device's size, its extent size, the mkfs options and the
/// files on it.
pub struct Layout {
    /// The realtime device's size; with `internal_start`, the whole
    /// image's.
    pub rt_bytes: u64,
    /// A zoned realtime section inside the data device from this block
    /// (`-r zoned=1,start=...`, given in `rt_opts`); 0 for a separate
    /// realtime device. `RtImage::rtdev` is then the image itself.
    pub internal_start: u64,
    /// The realtime extent size (mkfs's default when empty: mkfs.xfs 6.15
    /// turns reflink off when it is given).
    pub extsize: &'static str,
    /// More `-r` options, each with its leading comma (",rgcount=3").
    pub rt_opts: &'static str,
    /// More mkfs.xfs arguments (["-m", "metadir=1"]).
    pub mkfs_args: Vec<&'static str>,
    /// The filesystem has realtime groups (realtime block numbers are
    /// group-encoded).
    pub rtgroups: bool,
    pub files: Vec<RtFile>,
    /// Every file gets the reflink flag (files may share realtime blocks,
    /// on realtime groups with reflink).
    pub reflink_files: bool,
    /// Realtime extents in use after the files are made (theirs, and the
    /// realtime superblock's).
    pub used: u64,
}

pub fn make_with(test: &str, layout: Layout) -> Option<RtImage> {
    let Some(x615) = super::fixtures::xfsprogs_615() else {
        super::skip(test, "xfsprogs 6.15 is missing (mkfs.xfs -r rtdev, xfs_db)");
        return None;
    };
    let tmp = super::TempDir::new("xfskit-rtdev");
    let dir = tmp.path().to_path_buf();
    let img = dir.join("rt.img");
    let internal = layout.internal_start > 0;
    let rtdev = if internal {
        img.clone()
    } else {
        dir.join("rt.rtdev")
    };
    let sizes = if internal {
        vec![(&img, layout.rt_bytes)]
    } else {
        vec![(&img, 64 << 20), (&rtdev, layout.rt_bytes)]
    };
    for (f, len) in sizes {
        std::fs::File::create(f)
            .and_then(|h| h.set_len(len))
            .expect("create image");
    }
    let plain = dir.join("plain");
    let plain_data = pattern(7, 9000);
    std::fs::write(&plain, &plain_data).expect("write");
    let files = layout.files;
    let mut proto = String::from("/\n0 0\nd--755 0 0\n");
    for f in &files {
        proto.push_str(&format!("{} ---644 0 0 /dev/null\n", f.name));
    }
    proto.push_str(&format!(
        "sub d--755 0 0\nplain ---644 0 0 {}\n$\n$\n",
        plain.display()
    ));
    let protofile = dir.join("proto");
    std::fs::write(&protofile, proto).expect("protofile");
    let mut r_opts: Vec<String> = Vec::new();
    if !internal {
        r_opts.push(format!("rtdev={}", rtdev.display()));
    }
    if !layout.extsize.is_empty() {
        r_opts.push(format!("extsize={}", layout.extsize));
    }
    r_opts.extend(
        layout
            .rt_opts
            .split(',')
            .filter(|o| !o.is_empty())
            .map(String::from),
    );
    let r_opts = r_opts.join(",");
    run_ok(
        tool(&x615, "mkfs.xfs")
            .env("TEST_DEV", "/dev/null")
            .env("TEST_DIR", "/tmp")
            .env("QA_CHECK_FS", "1")
            .args(["-q", "-f", "-b", "size=4096"])
            .args(&layout.mkfs_args)
            .arg("-r")
            .arg(r_opts)
            .arg("-p")
            .arg(&protofile)
            .arg(&img),
        "mkfs.xfs 6.15 -r rtdev",
    );
    let ls = run_ok(
        tool(&x615, "xfs_db").args(["-r", "-c", "ls /"]).arg(&img),
        "xfs_db ls",
    );
    let ino_of = |name: &str| -> u64 {
        ls.lines()
            .find(|l| l.ends_with(&format!(" {name} (good)")))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {ls}"))
    };
    let set = |c: String| ["-c".to_string(), format!("write -d {c}")];
    // Where a realtime block number is on the device: with realtime groups
    // it is group << rgblklog | block in group, the groups end to end.
    let linear = |rtb: u64| -> u64 {
        if !layout.rtgroups {
            return rtb;
        }
        let sb = run_ok(
            tool(&x615, "xfs_db")
                .args([
                    "-r",
                    "-c",
                    "sb 0",
                    "-c",
                    "print rgblklog rgextents rextsize",
                ])
                .arg(&img),
            "xfs_db sb",
        );
        let log = field(&sb, "rgblklog");
        let per = field(&sb, "rgextents") * field(&sb, "rextsize");
        layout.internal_start + (rtb >> log) * per + (rtb & ((1 << log) - 1))
    };
    let mut args = vec!["-x".to_string()];
    let dev = std::fs::OpenOptions::new()
        .write(true)
        .open(&rtdev)
        .expect("open rtdev");
    let mut out = Vec::new();
    for (k, f) in files.iter().enumerate() {
        args.extend(["-c".into(), format!("inode {}", ino_of(f.name))]);
        let blocks: u64 = f.extents.iter().map(|e| e.2).sum();
        for c in [
            "core.realtime 1".to_string(),
            format!("core.size {}", f.size),
            format!("core.nextents {}", f.extents.len()),
            format!("core.nblocks {blocks}"),
            format!("v3.reflink {}", u8::from(layout.reflink_files)),
        ] {
            args.extend(set(c));
        }
        let data = pattern(100 + k as u64, f.size as usize);
        let mut want = vec![0u8; f.size as usize];
        for (i, &(off, rtb, len, unwritten)) in f.extents.iter().enumerate() {
            for c in [
                format!("u3.bmx[{i}].startoff {off}"),
                format!("u3.bmx[{i}].startblock {rtb}"),
                format!("u3.bmx[{i}].blockcount {len}"),
                format!("u3.bmx[{i}].extentflag {}", u8::from(unwritten)),
            ] {
                args.extend(set(c));
            }
            let a = (off * BS) as usize;
            let b = (((off + len) * BS) as usize).min(data.len());
            if unwritten {
                // Stale bytes on the device that must not show.
                dev.write_all_at(&vec![0xee; (len * BS) as usize], linear(rtb) * BS)
                    .expect("stale data");
            } else {
                dev.write_all_at(&data[a..b], linear(rtb) * BS)
                    .expect("rt data");
                want[a..b].copy_from_slice(&data[a..b]);
            }
        }
        out.push((format!("/{}", f.name), want));
    }
    drop(dev);
    run_ok(tool(&x615, "xfs_db").args(&args).arg(&img), "xfs_db writes");
    // The realtime bitmap, summary and free count made to match the files.
    let mut c = tool(&x615, "xfs_repair");
    if !internal {
        c.arg("-r").arg(&rtdev);
    }
    let o = c.arg(&img).output().expect("xfs_repair");
    assert!(o.status.success(), "xfs_repair -r: {}", output_text(&o));
    let repaired = output_text(&o);
    out.push(("/sub/plain".into(), plain_data));
    let im = RtImage {
        _tmp: tmp,
        img,
        rtdev,
        files: out,
        x615,
        dir,
    };
    let (ok, text) = im.repair_n();
    assert!(ok, "xfs_repair -n -r 6.15 on the realtime image: {text}");
    let sb = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print frextents rextents"])
            .arg(&im.img),
        "xfs_db sb",
    );
    assert_eq!(
        field(&sb, "rextents") - field(&sb, "frextents"),
        layout.used,
        "{sb}\nxfs_repair -r said: {repaired}"
    );
    Some(im)
}

/// True when `dir` is a mount point in /proc/mounts.
fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}
