//! File fragmentation as `xfs_db -c frag` reports it: over the forks of
//! every allocated inode, the extent records there are (actual) against the
//! runs of them that follow one another in the file (ideal: a record that
//! starts where the one before it ended continues the run).
//!
//! Cost: each AG's inode btree walked, the clusters that hold allocated
//! inodes read, and each fork's extent records streamed (one bmbt block
//! per level held); nothing kept per inode.

use crate::bytes::be64;
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::{AgNumber, Ino};
use crate::inode::{decode_checked, for_each_extent, Fork, ForkFormat, Inode};
use crate::scan::inobt;
use xfs_format::types::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

/// Which forks count (xfs_db's -a -d -f -l -q -R -r; all when none is
/// chosen).
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Attribute forks (-a).
    pub attr: bool,
    /// Directories (-d).
    pub dirs: bool,
    /// Regular files (-f).
    pub files: bool,
    /// Symbolic links (-l).
    pub links: bool,
    /// Quota files (-q).
    pub quota: bool,
    /// The realtime bitmap and summary files (-R).
    pub rt_meta: bool,
    /// Realtime files (-r).
    pub realtime: bool,
}

impl Options {
    /// Every kind, as xfs_db counts when given none.
    pub fn all() -> Options {
        Options {
            attr: true,
            dirs: true,
            files: true,
            links: true,
            quota: true,
            rt_meta: true,
            realtime: true,
        }
    }

    fn or_all(self) -> Options {
        let o = self;
        if o.attr || o.dirs || o.files || o.links || o.quota || o.rt_meta || o.realtime {
            o
        } else {
            Options::all()
        }
    }
}

/// The totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Extent records.
    pub actual: u64,
    /// Runs of records contiguous in the file.
    pub ideal: u64,
}

const DIFLAG_REALTIME: u16 = 0x1;

/// Counts `fork` of `ip`: its records and its runs.
fn count_fork(fs: &Fs, ip: &Inode, fork: Fork) -> Result<Report> {
    let (format, n) = match fork {
        Fork::Data => (ip.format, ip.nextents),
        Fork::Attr => (ip.aformat, u64::from(ip.anextents)),
    };
    let mut r = Report::default();
    if n == 0 || !matches!(format, ForkFormat::Extents | ForkFormat::Btree) {
        return Ok(r);
    }
    let mut end: Option<u64> = None;
    for_each_extent(fs, ip, fork, &mut |e| {
        r.actual += 1;
        if end != Some(e.offset) {
            r.ideal += 1;
        }
        end = Some(e.end());
        Ok(())
    })?;
    Ok(r)
}

/// Scans every allocated inode; `each` sees, for every inode with a fork
/// counted, its number and what it added (xfs_db's -v).
pub fn scan(fs: &Fs, opts: Options, each: &mut dyn FnMut(u64, Report)) -> Result<Report> {
    let o = opts.or_all();
    let geo = fs.geometry();
    let mut sb = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(0, &mut sb)?;
    let quota = [be64(&sb, 160), be64(&sb, 168), be64(&sb, 232)];
    let rt_meta = [geo.rbm_ino.0, geo.rsum_ino.0];
    let isize = geo.inode_size as usize;
    let ipc = geo.inodes_per_cluster().clamp(1, 64);
    let mut total = Report::default();
    let mut buf = vec![0u8; ipc as usize * isize];
    for agno in 0..geo.ag_count {
        inobt::walk(fs, agno, 0, |rec| {
            let alloc = rec.allocated();
            for k in (0..64u32).step_by(ipc as usize) {
                let mask = if ipc == 64 {
                    u64::MAX
                } else {
                    ((1u64 << ipc) - 1) << k
                };
                if alloc & mask == 0 {
                    continue;
                }
                let first = geo.ino_make(AgNumber(agno), rec.startino + k);
                fs.read_bytes(geo.ino_to_bytes(first), &mut buf)?;
                for j in 0..ipc {
                    if alloc & (1u64 << (k + j)) == 0 {
                        continue;
                    }
                    let ino = Ino(first.0 + u64::from(j));
                    let raw = &buf[j as usize * isize..(j as usize + 1) * isize];
                    let ip = decode_checked(fs, ino, raw)?;
                    let data = match ip.mode & S_IFMT {
                        S_IFDIR => o.dirs,
                        S_IFREG if ip.flags & DIFLAG_REALTIME != 0 && !o.realtime => false,
                        S_IFREG if rt_meta.contains(&ino.0) && !o.rt_meta => false,
                        S_IFREG if quota.contains(&ino.0) && !o.quota => false,
                        S_IFREG => o.files,
                        S_IFLNK => o.links,
                        _ => false,
                    };
                    let attr = o.attr && ip.forkoff != 0;
                    let mut r = Report::default();
                    for (yes, fork) in [(data, Fork::Data), (attr, Fork::Attr)] {
                        if yes {
                            let f = count_fork(fs, &ip, fork)?;
                            r.actual += f.actual;
                            r.ideal += f.ideal;
                        }
                    }
                    total.actual += r.actual;
                    total.ideal += r.ideal;
                    if data || attr {
                        each(ino.0, r);
                    }
                }
            }
            Ok(true)
        })?;
    }
    Ok(total)
}

/// `%.2f` of `n / d` as glibc prints it, "-nan" for 0 / 0 and "inf" for a
/// division by zero.
fn ratio(n: f64, d: f64) -> String {
    if d == 0.0 {
        if n == 0.0 { "-nan" } else { "inf" }.into()
    } else {
        format!("{:.2}", n / d)
    }
}

/// The report as xfs_db prints it.
pub fn render(r: &Report) -> String {
    let factor = if r.actual != 0 {
        format!(
            "{:.2}",
            (r.actual as f64 - r.ideal as f64) * 100.0 / r.actual as f64
        )
    } else {
        "0.00".into()
    };
    format!(
        "actual {}, ideal {}, fragmentation factor {factor}%\n\
         Note, this number is largely meaningless.\n\
         Files on this filesystem average {} extents per file\n",
        r.actual,
        r.ideal,
        ratio(r.actual as f64, r.ideal as f64)
    )
}

/// The report as JSON.
pub fn to_json(r: &Report) -> serde_json::Value {
    serde_json::json!({
        "actual": r.actual,
        "ideal": r.ideal,
        "fragmentation_factor": (r.actual != 0)
            .then(|| (r.actual as f64 - r.ideal as f64) * 100.0 / r.actual as f64),
        "extents_per_file": (r.ideal != 0).then(|| r.actual as f64 / r.ideal as f64),
    })
}
