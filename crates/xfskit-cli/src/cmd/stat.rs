//! `xfskit stat`: every inode field, the xattrs and the extent maps.

use super::ls::{format_time, mode_string};
use crate::cmd::out::{out, outln};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::attr::{self, Xattr};
use xfskit::inode::{extents, Extent, FileType, Fork, Inode, Timestamp};
use xfskit::{paths, Error, Fs};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "Print everything about one inode of an XFS image.

Shows every field of the inode core (mode, owner, sizes, counters, flags,
the four timestamps with nanoseconds, fork formats), every extended
attribute of every namespace (the value as text when printable, in hex
otherwise), the symlink target, and the extent maps of the data and
attribute forks laid out like `xfs_bmap -v`: offsets and block ranges are
in 512-byte units; AG-OFFSET is relative to the AG; FLAGS 010000 marks an
unwritten (preallocated) extent. Holes are listed as 'hole'. A realtime
file's data fork shows RT-BLOCK-RANGE, 512-byte units of the realtime
device, without AG columns.

On a filesystem with parent pointers (mkfs.xfs -n parent=1, the default
from xfsprogs 6.18) every path of the inode is shown, found from its
parent pointers up to the root without walking the tree: one per hard
link. A pointer whose directory has another generation, or a chain that
loops, is an error naming the inode (exit 5). In JSON the paths are the
array \"paths\" (null without parent pointers).

The inode is named by PATH or by number with --inode.

Exit status: 0 on success, 1 if PATH (or inode) does not exist, 3 if the filesystem is
unsupported or its log needs replay, 5 if the image is corrupt.

Examples:
  xfskit stat disk.img /etc/passwd
  xfskit stat --json disk.img / | jq .extents.data
  xfskit stat --inode 131 disk.img";

/// Arguments of `xfskit stat`.
#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// The path to describe.
    #[arg(required_unless_present = "inode")]
    pub path: Option<String>,
    /// Describe the inode of this number instead of a path.
    #[arg(long, value_name = "INO", conflicts_with = "path")]
    pub inode: Option<u64>,
}

/// Flag value of an unwritten extent, as xfs_bmap prints it.
const FLG_PRE: u32 = 0o010000;

/// One row of the extent table: a mapping or a hole, in 512-byte units.
struct MapRow {
    file_start: u64,
    file_end: u64,
    /// (daddr start, daddr end, agno, agbno start in bb, agbno end in bb);
    /// a realtime file's data: daddrs of the realtime device, agno
    /// `u32::MAX` (no AG columns, as xfs_bmap prints them).
    mapped: Option<(u64, u64, u32, u64, u64)>,
    total: u64,
    flags: u32,
}

/// Rows for a fork's mapping; `eof_blocks` (data fork) adds a trailing
/// hole up to the end of the file, as xfs_bmap shows it.
fn map_rows(fs: &Fs, map: &[Extent], eof_blocks: u64, realtime: bool) -> Vec<MapRow> {
    let g = fs.geometry();
    let bbs = u64::from(g.block_size) / 512;
    let mut rows = Vec::new();
    let mut next = 0u64;
    for e in map {
        if e.offset > next {
            rows.push(MapRow {
                file_start: next * bbs,
                file_end: e.offset * bbs - 1,
                mapped: None,
                total: (e.offset - next) * bbs,
                flags: 0,
            });
        }
        let total = e.len * bbs;
        let mapped = if realtime {
            let d = g.rtb_to_bytes(e.start.0) / 512;
            (d, d + total - 1, u32::MAX, 0, 0)
        } else {
            let d = g.fsb_to_daddr(e.start).0;
            let (agno, agbno) = g.fsb_split(e.start);
            let ag_start = u64::from(agbno.0) * bbs;
            (d, d + total - 1, agno.0, ag_start, ag_start + total - 1)
        };
        rows.push(MapRow {
            file_start: e.offset * bbs,
            file_end: e.end() * bbs - 1,
            mapped: Some(mapped),
            total,
            flags: if e.unwritten { FLG_PRE } else { 0 },
        });
        next = e.end();
    }
    if eof_blocks > next {
        rows.push(MapRow {
            file_start: next * bbs,
            file_end: eof_blocks * bbs - 1,
            mapped: None,
            total: (eof_blocks - next) * bbs,
            flags: 0,
        });
    }
    rows
}

fn render_map(rows: &[MapRow]) -> String {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (br, ag, agoff) = match r.mapped {
                Some((a, b, u32::MAX, _, _)) => (format!("{a}..{b}"), String::new(), String::new()),
                Some((a, b, agno, s, e)) => {
                    (format!("{a}..{b}"), agno.to_string(), format!("({s}..{e})"))
                }
                None => ("hole".to_string(), String::new(), String::new()),
            };
            [
                format!("{i}:"),
                format!("[{}..{}]:", r.file_start, r.file_end),
                br,
                ag,
                agoff,
                r.total.to_string(),
            ]
        })
        .collect();
    let realtime = rows
        .iter()
        .any(|r| matches!(r.mapped, Some((_, _, u32::MAX, _, _))));
    let heads = if realtime {
        ["EXT:", "FILE-OFFSET", "RT-BLOCK-RANGE", "", "", "TOTAL"]
    } else {
        [
            "EXT:",
            "FILE-OFFSET",
            "BLOCK-RANGE",
            "AG",
            "AG-OFFSET",
            "TOTAL",
        ]
    };
    let w: Vec<usize> = (0..6)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].len())
                .chain([heads[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = format!(
        " {:>w0$} {:<w1$} {:<w2$} {:>w3$} {:<w4$} {:>w5$} FLAGS\n",
        heads[0],
        heads[1],
        heads[2],
        heads[3],
        heads[4],
        heads[5],
        w0 = w[0],
        w1 = w[1],
        w2 = w[2],
        w3 = w[3],
        w4 = w[4],
        w5 = w[5]
    );
    for (c, r) in cells.iter().zip(rows) {
        let flags = if r.mapped.is_some() {
            format!(" {:06o}", r.flags)
        } else {
            String::new()
        };
        s += &format!(
            " {:>w0$} {:<w1$} {:<w2$} {:>w3$} {:<w4$} {:>w5$}{flags}\n",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5]
        );
    }
    s
}

/// An xattr value as text when printable, else as hex.
fn show_value(v: &[u8]) -> String {
    match std::str::from_utf8(v) {
        Ok(s) if s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t') => format!("{s:?}"),
        _ => {
            let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

fn ts_json(t: Timestamp) -> Value {
    json!({ "sec": t.sec, "nsec": t.nsec, "utc": format_time(t) })
}

fn fields(i: &Inode) -> Vec<(&'static str, Value)> {
    let (maj, min) = i.rdev_major_minor();
    vec![
        ("ino", json!(i.ino.0)),
        ("type", json!(format!("{:?}", i.file_type))),
        ("mode", json!(format!("{:o}", i.mode))),
        ("mode_string", json!(mode_string(i.mode))),
        ("uid", json!(i.uid)),
        ("gid", json!(i.gid)),
        ("nlink", json!(i.nlink)),
        ("projid", json!(i.projid)),
        ("size", json!(i.size)),
        ("nblocks", json!(i.nblocks)),
        ("extsize", json!(i.extsize)),
        ("cowextsize", json!(i.cowextsize)),
        ("nextents", json!(i.nextents)),
        ("anextents", json!(i.anextents)),
        ("format", json!(format!("{:?}", i.format))),
        ("forkoff", json!(i.forkoff)),
        (
            "aformat",
            json!(if i.has_attr_fork() {
                format!("{:?}", i.aformat)
            } else {
                "none".into()
            }),
        ),
        ("flags", json!(format!("{:#x}", i.flags))),
        ("flags2", json!(format!("{:#x}", i.flags2))),
        ("gen", json!(i.gen)),
        ("next_unlinked", json!(i.next_unlinked)),
        ("changecount", json!(i.changecount)),
        ("lsn", json!(format!("{:#x}", i.lsn))),
        ("rdev", json!(format!("{maj},{min}"))),
    ]
}

fn xattrs_of(fs: &Fs, i: &Inode) -> Result<Vec<Xattr>, Error> {
    if xfskit::extract::has_attrs(i) {
        attr::list(fs, i)
    } else {
        Ok(Vec::new())
    }
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    let i = match (&args.path, args.inode) {
        (Some(p), _) => fs.lookup_path(p.as_bytes())?,
        (None, Some(n)) => {
            if !fs.geometry().ino_valid(xfskit::Ino(n)) {
                return Err(Error::NotFound(format!(
                    "inode {n}: not an inode number of this filesystem"
                )));
            }
            let i = fs.inode(xfskit::Ino(n))?;
            if i.mode == 0 {
                return Err(Error::NotFound(format!("inode {n} is not allocated")));
            }
            i
        }
        (None, None) => return Err(Error::Invalid("give a PATH or --inode".into())),
    };
    let paths = if paths::has_parent_pointers(&fs) {
        Some(paths::PathCache::new(paths::DEFAULT_CACHE_BYTES).paths(&fs, &i)?)
    } else {
        None
    };
    let shown_paths = |ps: &[Vec<u8>]| -> Vec<String> {
        ps.iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    };
    let xattrs = xattrs_of(&fs, &i)?;
    let target = if i.file_type == FileType::Symlink {
        Some(xfskit::symlink::read_link(&fs, &i)?)
    } else {
        None
    };
    let data = if matches!(
        i.format,
        xfskit::inode::ForkFormat::Extents | xfskit::inode::ForkFormat::Btree
    ) {
        extents(&fs, &i, Fork::Data)?
    } else {
        Vec::new()
    };
    let attr_map = if i.has_attr_fork() {
        extents(&fs, &i, Fork::Attr)?
    } else {
        Vec::new()
    };
    let times = [
        ("atime", i.atime),
        ("mtime", i.mtime),
        ("ctime", i.ctime),
        ("crtime", i.crtime),
    ];
    if args.json {
        let mut m = serde_json::Map::new();
        if let Some(p) = &args.path {
            m.insert("path".into(), json!(p));
        }
        m.insert(
            "paths".into(),
            match &paths {
                Some(ps) => json!(shown_paths(ps)),
                None => Value::Null,
            },
        );
        for (k, v) in fields(&i) {
            m.insert(k.into(), v);
        }
        for (k, t) in times {
            m.insert(k.into(), ts_json(t));
        }
        if let Some(t) = &target {
            m.insert("target".into(), json!(String::from_utf8_lossy(t)));
        }
        let xs: Vec<Value> = xattrs
            .iter()
            .map(|x| json!({ "name": String::from_utf8_lossy(&x.full_name()), "value": show_value(&x.value), "len": x.value.len() }))
            .collect();
        m.insert("xattrs".into(), json!(xs));
        let ext = |map: &[Extent]| -> Value {
            map.iter()
                .map(|e| json!({ "offset": e.offset, "start": e.start.0, "len": e.len, "unwritten": e.unwritten }))
                .collect()
        };
        m.insert(
            "extents".into(),
            json!({ "data": ext(&data), "attr": ext(&attr_map) }),
        );
        outln!(
            "{}",
            serde_json::to_string_pretty(&Value::Object(m))
                .map_err(|e| Error::Invalid(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut s = match &args.path {
        Some(p) => format!("  path: {p}\n"),
        None => String::new(),
    };
    for (k, v) in fields(&i) {
        let v = v
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string());
        s += &format!("{k:>14}: {v}\n");
    }

    for (k, t) in times {
        s += &format!("{k:>14}: {} ({}.{:09})\n", format_time(t), t.sec, t.nsec);
    }
    if let Some(ps) = &paths {
        s += &format!("paths ({}):\n", ps.len());
        for p in shown_paths(ps) {
            s += &format!("  {p}\n");
        }
    }
    if let Some(t) = &target {
        s += &format!("{:>14}: {}\n", "target", String::from_utf8_lossy(t));
    }
    s += &format!("xattrs ({}):\n", xattrs.len());
    for x in &xattrs {
        let shown = if x.value.len() > 64 {
            format!(
                "{}... ({} bytes)",
                show_value(&x.value[..64]),
                x.value.len()
            )
        } else {
            show_value(&x.value)
        };
        s += &format!("  {} = {shown}\n", String::from_utf8_lossy(&x.full_name()));
    }
    let bs = u64::from(fs.geometry().block_size);
    let eof = if i.file_type == FileType::File {
        i.size.div_ceil(bs)
    } else {
        0
    };
    for (name, map, eof) in [("data", &data, eof), ("attr", &attr_map, 0)] {
        if map.is_empty() {
            s += &format!("{name} fork: no extents\n");
        } else {
            let realtime = name == "data" && i.is_realtime();
            s += &format!(
                "{name} fork:\n{}",
                render_map(&map_rows(&fs, map, eof, realtime))
            );
        }
    }
    out!("{s}");
    Ok(ExitCode::SUCCESS)
}
