//! Writing a fresh filesystem: check the target, clear what must be clear,
//! then write the root inode chunk, the clean log and every AG's headers
//! (built and written by a few threads, see `agwrite`), and sync.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use xfs_format::types::Uuid;

use super::geometry::{compute_geometry, DeviceTopology, MkfsGeometry, TargetKind};
use super::io::{IoStats, Sink, WriteBatch};
use super::options::{MkfsError, MkfsOptions};
use super::rootdir::{root_chunk, rtdir_chunk, Timestamp};
use super::{agwrite, wipe, writer};
use crate::dev::Device;
use crate::log::clean_record;

/// Bytes mkfs clears at the start and end of the target to kill old
/// signatures (as mkfs.xfs does).
const WHACK_BYTES: u64 = 128 * 1024;

/// Callback told how many AGs have been written so far, and of how many.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Choices of `xfskit mkfs` beyond the mkfs.xfs options.
#[derive(Default, Clone, Copy)]
pub struct WriteOptions<'a> {
    /// Time stamped on the new inodes; default `SOURCE_DATE_EPOCH` or now.
    pub timestamp: Option<Timestamp>,
    /// Progress reports while AG headers are written.
    pub progress: Option<Progress<'a>>,
}

/// What was written, for reports and benchmarks.
#[derive(Debug, Clone)]
pub struct MkfsReport {
    /// The geometry of the new filesystem.
    pub geometry: MkfsGeometry,
    /// The UUID it got.
    pub uuid: [u8; 16],
    /// Write calls and bytes.
    pub stats: IoStats,
}

fn io_err(what: &str, e: std::io::Error) -> MkfsError {
    MkfsError::Io(format!("{what}: {e}"))
}

/// The time to put in new inodes: explicit, `SOURCE_DATE_EPOCH`, or now.
pub fn default_timestamp() -> Timestamp {
    if let Some(secs) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
    {
        return Timestamp { secs, nsec: 0 };
    }
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        secs: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}

/// A random (version 4) UUID from /dev/urandom (the clock and pid without it).
pub(crate) fn random_uuid() -> [u8; 16] {
    let mut u = [0u8; 16];
    let ok = File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut u))
        .is_ok();
    if !ok {
        // No randomness source: derive from the clock and pid.
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u[..8].copy_from_slice(&(d.as_nanos() as u64).to_le_bytes());
        u[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

fn sysfs_u32(dev: &str, name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/dev/block/{dev}/queue/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(crate) fn block_topology(meta: &std::fs::Metadata) -> DeviceTopology {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let dev = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let logical = sysfs_u32(&dev, "logical_block_size").unwrap_or(512);
    DeviceTopology {
        logical_sector_size: logical,
        physical_sector_size: sysfs_u32(&dev, "physical_block_size").unwrap_or(logical),
        stripe_unit: sysfs_u32(&dev, "minimum_io_size")
            .filter(|&v| v > logical)
            .unwrap_or(0),
        stripe_width: sysfs_u32(&dev, "optimal_io_size").unwrap_or(0),
        // BLKROTATIONAL, which mkfs.xfs asks, reads the same queue flag.
        solid_state: sysfs_u32(&dev, "rotational") == Some(0),
    }
}

/// Geometry for `target` without touching it (used by `-N` and by [`mkfs`]).
pub fn plan(
    target: &Path,
    opts: &MkfsOptions,
) -> Result<(MkfsGeometry, Option<std::fs::Metadata>), MkfsError> {
    let meta = match std::fs::metadata(target) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && opts.data_size.is_some() => None,
        Err(e) => return Err(io_err(&format!("cannot open {}", target.display()), e)),
    };
    let (size, kind) = match &meta {
        Some(m) if m.file_type().is_block_device() => {
            let f = File::open(target)
                .map_err(|e| io_err(&format!("cannot open {}", target.display()), e))?;
            let size = crate::dev::FileDevice::open_read_only(target)
                .map(|d| d.len())
                .map_err(|e| io_err(&format!("cannot size {}", target.display()), e))?;
            drop(f);
            (size, TargetKind::BlockDevice(block_topology(m)))
        }
        Some(m) if m.is_file() => (m.len(), TargetKind::File),
        Some(_) => {
            return Err(MkfsError::Io(format!(
                "{}: not a regular file or block device",
                target.display()
            )))
        }
        None => (0, TargetKind::File),
    };
    if let (Some(m), Some(name)) = (&meta, &opts.log_dev) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(l) = std::fs::metadata(name) {
            if (l.dev(), l.ino(), l.rdev()) == (m.dev(), m.ino(), m.rdev()) {
                return Err(MkfsError::BadOption(format!(
                    "log device {name} is the data device: an external log needs a device of its own"
                )));
            }
        }
    }
    let mut o = opts.clone();
    if o.data_name.is_none() {
        o.data_name = Some(target.display().to_string());
    }
    Ok((compute_geometry(&o, size, kind)?, meta))
}

/// Make an XFS filesystem on `target` (an image file or block device), as
/// `mkfs.xfs` would with the same options.  A missing image file is created
/// when `-d size=` is given.  With `-N` nothing is written.
pub fn mkfs(target: &Path, opts: &MkfsOptions) -> Result<MkfsGeometry, MkfsError> {
    mkfs_with(target, opts, &WriteOptions::default()).map(|r| r.geometry)
}

/// [`mkfs`] with a timestamp and progress reporting; returns what it wrote.
pub fn mkfs_with(
    target: &Path,
    opts: &MkfsOptions,
    w: &WriteOptions<'_>,
) -> Result<MkfsReport, MkfsError> {
    let (g, meta) = plan(target, opts)?;
    if opts.dry_run {
        return Ok(MkfsReport {
            geometry: g,
            uuid: opts.uuid.unwrap_or([0; 16]),
            stats: IoStats::default(),
        });
    }
    let created = meta.is_none();
    let block_device = meta
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(created)
        .truncate(false)
        .open(target)
        .map_err(|e| io_err(&format!("cannot open {} for writing", target.display()), e))?;
    let len = if block_device {
        crate::dev::FileDevice::open_read_only(target)
            .map(|d| d.len())
            .unwrap_or(0)
    } else {
        meta.as_ref().map_or(0, |m| m.len())
    };
    // AG headers go through a second, O_DIRECT handle when the target takes
    // one: many small writes in flight at once cost the target filesystem
    // less than dirty pages converted one by one at fsync.
    let direct = OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(target)
        .ok();
    let sink = Sink::File {
        file: &file,
        block_device,
        direct: direct.as_ref(),
    };
    let r = write_fs(&sink, &g, opts, w, len, |need| {
        if !block_device && len < need {
            file.set_len(need)
                .map_err(|e| io_err("cannot grow the image file", e))?;
        }
        Ok(())
    });
    if r.is_err() && created {
        let _ = std::fs::remove_file(target);
    }
    r
}

/// Make a filesystem on an engine device of `dev.len()` bytes (treated like
/// an image file).
pub fn mkfs_device(
    dev: &dyn Device,
    opts: &MkfsOptions,
    w: &WriteOptions<'_>,
) -> Result<MkfsReport, MkfsError> {
    let g = compute_geometry(opts, dev.len(), TargetKind::File)?;
    if opts.dry_run {
        return Ok(MkfsReport {
            geometry: g,
            uuid: opts.uuid.unwrap_or([0; 16]),
            stats: IoStats::default(),
        });
    }
    let len = dev.len();
    write_fs(&Sink::Device(dev), &g, opts, w, len, |need| {
        if need > len {
            return Err(MkfsError::Io(format!(
                "device has {len} bytes, filesystem needs {need}"
            )));
        }
        Ok(())
    })
}

fn write_fs(
    sink: &Sink<'_>,
    g: &MkfsGeometry,
    opts: &MkfsOptions,
    w: &WriteOptions<'_>,
    len: u64,
    grow: impl FnOnce(u64) -> Result<(), MkfsError>,
) -> Result<MkfsReport, MkfsError> {
    let mut stats = IoStats::default();
    let (sigs, old) = wipe::detect(sink, len).map_err(|e| io_err("cannot read the target", e))?;
    if !sigs.is_empty() && !opts.force {
        let what: Vec<String> = sigs
            .iter()
            .map(|s| format!("{} (at byte {})", s.kind, s.offset))
            .collect();
        return Err(MkfsError::Exists(format!(
            "the target appears to contain an existing filesystem or partition table: {}\n\
             (use -f to force overwrite)",
            what.join(", ")
        )));
    }
    let need = g.dblocks << g.blocklog;
    grow(need)?;
    let len = len.max(need);
    let uuid_bytes = opts.uuid.unwrap_or_else(random_uuid);
    let uuid = Uuid(uuid_bytes);
    let now = w.timestamp.unwrap_or_else(default_timestamp);

    // Clear: whole-target discard unless -K, then old signatures and the log.
    let discarded = !opts.no_discard && sink.discard_all(len);
    if !discarded {
        if let Some(old) = &old {
            wipe::zero_old_secondaries(sink, old, len, &mut stats)
                .map_err(|e| io_err("wipe", e))?;
        }
        let whack = WHACK_BYTES.min(len);
        sink.zero_range(0, whack, &mut stats)
            .map_err(|e| io_err("wipe", e))?;
        sink.zero_range(len - whack, whack, &mut stats)
            .map_err(|e| io_err("wipe", e))?;
    }
    let bs = u64::from(g.blocksize);
    let log_off = writer::daddr(
        g,
        g.log_agno,
        (g.logstart & ((1u64 << g.agblklog) - 1)) as u32,
    ) * 512;
    let log_len = u64::from(g.logblocks) * bs;
    if !discarded && g.logdev.is_none() {
        sink.zero_range(log_off, log_len, &mut stats)
            .map_err(|e| io_err("zeroing the log", e))?;
    }

    // Root inode chunk and the log record.
    let mut batch = WriteBatch::default();
    let root_bno = (g.rootino >> g.inopblog) as u32;
    batch.push(
        writer::daddr(g, 0, root_bno) * 512,
        root_chunk(g, &uuid, now),
    );
    if let Some(rt) = g.rt.as_ref().filter(|rt| rt.groups.is_none()) {
        let files = [
            (&rt.rbm_extents, super::realtime::bitmap_image(g, rt)),
            (&rt.rsum_extents, super::realtime::summary_image(g, rt)),
        ];
        for (extents, data) in files {
            let mut at = 0usize;
            for &(start, len) in extents.iter() {
                let n = len as usize * g.blocksize as usize;
                batch.push(writer::daddr(g, 0, start) * 512, data[at..at + n].to_vec());
                at += n;
            }
        }
    }
    if let (Some(m), Some(groups)) = (g.metadir, g.rt.as_ref().and_then(|rt| rt.groups.as_ref())) {
        for f in groups.files.iter().filter(|f| !f.extents.is_empty()) {
            let blocks: Vec<u32> = f
                .extents
                .iter()
                .flat_map(|&(start, len)| start..start + len)
                .collect();
            let at = |b: u64| writer::daddr(g, m.rtdir_agno, blocks[b as usize]);
            let data = super::rtgroups::file_image(g, f, &uuid, &at);
            let mut pos = 0usize;
            for &(start, len) in &f.extents {
                let n = len as usize * g.blocksize as usize;
                batch.push(
                    writer::daddr(g, m.rtdir_agno, start) * 512,
                    data[pos..pos + n].to_vec(),
                );
                pos += n;
            }
        }
    }
    if let (Some(m), Some(chunk)) = (g.metadir, rtdir_chunk(g, &uuid, now)) {
        batch.push(writer::daddr(g, m.rtdir_agno, m.rtdir_agbno) * 512, chunk);
    }
    let lsunit = if g.logsunit > 1 {
        g.logsunit
    } else {
        u32::from(g.logsectsize)
    };
    let record = clean_record::first_record(&uuid, lsunit);
    match &g.logdev {
        None => batch.push(log_off, record),
        Some(name) => write_external_log(name, log_len, &record, &mut stats)?,
    }
    batch
        .flush_to(sink, &mut stats)
        .map_err(|e| io_err("write", e))?;

    // AG headers, built and written by a few threads.
    let primary = writer::primary_sb(g, &uuid);
    let st = agwrite::write_ag_headers(sink, g, &primary, w.progress)
        .map_err(|e| io_err("writing AG headers", e))?;
    stats.write_calls += st.write_calls;
    stats.bytes_written += st.bytes_written;
    sink.flush().map_err(|e| io_err("sync", e))?;
    if let Some(rt) = g.rt.as_ref().filter(|rt| rt.groups.is_some()) {
        write_rtsb(g, rt, &uuid, &mut stats)?;
    }
    Ok(MkfsReport {
        geometry: g.clone(),
        uuid: uuid_bytes,
        stats,
    })
}

/// Clear the log on the external log device `name` over the log's `len`
/// bytes (the rest of the device is left alone, as mkfs.xfs leaves it) and
/// write its first record at block 0.
fn write_external_log(
    name: &str,
    len: u64,
    record: &[u8],
    stats: &mut IoStats,
) -> Result<(), MkfsError> {
    let what = format!("log device {name}");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(name)
        .map_err(|e| io_err(&format!("cannot open {what} for writing"), e))?;
    let block_device = f.metadata().is_ok_and(|m| m.file_type().is_block_device());
    let sink = Sink::File {
        file: &f,
        block_device,
        direct: None,
    };
    sink.zero_range(0, len, stats)
        .map_err(|e| io_err(&format!("zeroing {what}"), e))?;
    sink.write_all_at(record, 0, stats)
        .map_err(|e| io_err(&what, e))?;
    sink.flush().map_err(|e| io_err(&what, e))
}

/// Write the realtime superblock at the start of the realtime device, and
/// the section's last block (zero) as mkfs.xfs does to prove it writable.
fn write_rtsb(
    g: &MkfsGeometry,
    rt: &super::realtime::RtLayout,
    uuid: &Uuid,
    stats: &mut IoStats,
) -> Result<(), MkfsError> {
    use std::os::unix::fs::FileExt;
    let what = format!("realtime device {}", rt.name);
    let f = OpenOptions::new()
        .write(true)
        .open(&rt.name)
        .map_err(|e| io_err(&format!("cannot open {what} for writing"), e))?;
    let bs = u64::from(g.blocksize);
    let last = (g.rblocks - 1) * bs;
    if last > 0 {
        f.write_all_at(&vec![0u8; bs as usize], last)
            .map_err(|e| io_err(&what, e))?;
        stats.write_calls += 1;
        stats.bytes_written += bs;
    }
    f.write_all_at(&super::rtgroups::rtsb_image(g, uuid), 0)
        .map_err(|e| io_err(&what, e))?;
    f.sync_all().map_err(|e| io_err(&what, e))?;
    stats.write_calls += 1;
    stats.bytes_written += bs;
    Ok(())
}
