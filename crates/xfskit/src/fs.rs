//! An open filesystem: device, geometry and buffer cache.
//!
//! `Fs` is the read engine's entry point. It is `Sync`: scans run one
//! thread per AG over a shared `&Fs`.

use crate::buf::cache::BufCache;
use crate::buf::verify::Verifier;
use crate::dev::{Device, FileDevice};
use crate::error::{Error, Location, Result};
use crate::geometry::{Daddr, Geometry, Ino};
use crate::inode::Inode;
use crate::log::LogState;
use crate::trans::{Trans, WriteState, WriteStats};
use std::path::Path;
use std::sync::Arc;

/// How to open a filesystem.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Read even if the log holds changes that were not written back, as
    /// the kernel's `norecovery` mount option does.
    pub norecovery: bool,
    /// Bytes of verified metadata to keep cached (0: a default).
    pub cache_bytes: usize,
    /// Writing: bytes of changed metadata and of file data that may wait
    /// before a writeback (None: 128 MiB and 32 MiB). Small limits make
    /// writebacks frequent (tests of what is read back after them).
    pub pending_limits: Option<(usize, usize)>,
    /// Writing without the journal: changes go in place only at writeback
    /// and a crash before [`Fs::sync`] leaves a damaged filesystem. For
    /// building new images, where a failed build leaves no image.
    pub no_journal: bool,
    /// Open even when the superblock's root inode is not a directory (the
    /// kernel refuses to mount such a filesystem; `check` reports it).
    pub any_root: bool,
    /// Writing: the data of every regular file follows its directory's
    /// filestream, as with the kernel's `filestreams` mount option (without
    /// it, only files with the filestream inode flag do).
    pub filestreams: bool,
    /// Writing for log recovery's own work after replay (intents, inodes
    /// left on the unlinked lists, staging extents): the log stays dirty
    /// until that work is done.
    pub after_replay: bool,
    /// The realtime device (`xfs_db -R`, `mount -o rtdev=`): the file or
    /// block device that holds the realtime section of a filesystem that
    /// has one. Without it, realtime files' data cannot be read.
    pub rtdev: Option<std::path::PathBuf>,
    /// The external log device (`xfs_db -l`, `xfs_repair -l`, `mount -o
    /// logdev=`) of a filesystem whose log is not inside the data section
    /// (`sb_logstart` 0). Without it such a log is neither read nor
    /// written: reads go on without replaying it and writes are refused.
    pub logdev: Option<std::path::PathBuf>,
}

/// An XFS filesystem opened for reading.
pub struct Fs {
    dev: Arc<dyn Device>,
    /// The realtime device, when the filesystem has a realtime section and
    /// it was given ([`OpenOptions::rtdev`]).
    rt: Option<Arc<dyn Device>>,
    geo: Geometry,
    cache: BufCache,
    log_state: LogState,
    write: Option<WriteState>,
    base: SbCounters,
    /// Set when a dirty log was replayed in memory at open.
    recovery: Option<crate::log::ReplayStats>,
    /// The device as it was before that replay (see [`Fs::before_log`]).
    unreplayed: Option<Arc<dyn Device>>,
    /// The log head (`cycle << 32 | block`) that metadata LSNs must be
    /// behind, 0 when not watched (see [`Fs::watch_lsns`]).
    lsn_limit: std::sync::atomic::AtomicU64,
    /// The newest block LSN read at or past `lsn_limit`.
    lsn_ahead: std::sync::Mutex<Option<LsnAhead>>,
    /// Read-write: the gate every I/O to the device goes through, closed
    /// by [`Fs::shut_down`].
    gate: Option<Arc<crate::dev::Gate>>,
}

/// Metadata read with an LSN at or past the log head (see
/// [`Fs::watch_lsns`]).
#[derive(Debug, Clone)]
pub struct LsnAhead {
    /// The largest such LSN (`cycle << 32 | block`).
    pub lsn: u64,
    /// The structure that carries it.
    pub what: &'static str,
    /// Where it is.
    pub location: Location,
    /// Blocks read with an LSN at or past the head.
    pub blocks: u64,
}

/// The superblock's free-space and inode counters when the filesystem was
/// opened; transactions keep deltas against them.
#[derive(Debug, Clone, Copy, Default)]
struct SbCounters {
    icount: u64,
    ifree: u64,
    fdblocks: u64,
}

impl Fs {
    /// Opens an image file or block device read-only.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Fs> {
        let dev = FileDevice::open_read_only(path)?;
        Fs::from_device(Box::new(dev), opts)
    }

    /// Opens an image file or block device for reading and writing. The
    /// log must be clean. Changes reach the device at [`Fs::sync`].
    pub fn open_rw(path: &Path, opts: &OpenOptions) -> Result<Fs> {
        let dev = FileDevice::open_read_write(path)?;
        Fs::from_device_rw(Box::new(dev), opts)
    }

    /// Replays the log of the image or device at `path` in place, as a
    /// kernel mount does, and leaves it clean (see
    /// [`crate::log::recover::recover_device`]). Nothing is written unless
    /// the whole log reads and replays without error.
    pub fn recover(
        path: &Path,
        opts: &crate::log::recover::RecoverOptions,
    ) -> Result<crate::log::recover::RecoverReport> {
        let dev: Arc<dyn Device> = Arc::new(FileDevice::open_read_write(path)?);
        let dev = match &opts.logdev {
            Some(p) => with_logdev(dev, p, true)?,
            None => dev,
        };
        crate::log::recover::recover_device(dev, opts)
    }

    /// Opens a filesystem on any device for reading and writing.
    /// A dirty log is recovered in place first, as the kernel's mount does.
    pub fn from_device_rw(dev: Box<dyn Device>, opts: &OpenOptions) -> Result<Fs> {
        Fs::open_rw_device(dev.into(), opts, None)
    }

    /// Opens a filesystem whose log was just replayed in place, for
    /// recovery's work after replay: the log stays dirty, new records go
    /// at the replayed log's head and its tail stays pinned at the
    /// replayed log's tail until the work is done (see
    /// `log::recover::finish`).
    pub(crate) fn open_after_replay(
        dev: Arc<dyn Device>,
        pos: crate::log::journal::HeadPos,
        tail_lsn: u64,
    ) -> Result<Fs> {
        let opts = OpenOptions {
            after_replay: true,
            ..Default::default()
        };
        Fs::open_rw_device(dev, &opts, Some((pos, tail_lsn)))
    }

    fn open_rw_device(
        dev: Arc<dyn Device>,
        opts: &OpenOptions,
        resume: Option<(crate::log::journal::HeadPos, u64)>,
    ) -> Result<Fs> {
        let dev = match &opts.logdev {
            Some(p) if dev.log_base().is_none() => with_logdev(dev, p, true)?,
            _ => dev,
        };
        let probe = Fs::from_device(
            Box::new(crate::log::recover::Shared(dev.clone())),
            &OpenOptions {
                norecovery: true,
                ..opts.clone()
            },
        )?;
        probe.geo.require_writable_format()?;
        crate::log::resv::require_log_size(&probe.geo)?;
        if probe.geo.rt_blocks > 0 && resume.is_none() {
            // Zoned sections are not written by xfskit; a classic realtime
            // section and realtime groups (their bitmaps, summaries and
            // rmap btrees; refcount btrees are read) are, given the device.
            if probe.geo.zoned {
                return Err(Error::Unsupported(
                    "writing to a zoned filesystem: zoned realtime sections are read-only in xfskit (their zones are written only at their write pointers and freed by garbage collection, which xfskit does not do)".into(),
                ));
            }
            if probe.rt.is_none() {
                return Err(Error::Unsupported(
                    "writing to a filesystem with a realtime section: needs the realtime device: --rtdev".into(),
                ));
            }
        }
        if matches!(probe.log_state, LogState::Dirty(_)) && resume.is_none() {
            drop(probe);
            crate::log::recover::recover_device(dev.clone(), &Default::default())?;
        }
        let mut o = opts.clone();
        // Recovered above: no replay here; a log still dirty is refused.
        o.norecovery = true;
        let gate = Arc::new(crate::dev::Gate::new(dev));
        let gated: Arc<dyn Device> = gate.clone();
        let mut fs = Fs::open_device(Box::new(crate::log::recover::Shared(gated)), &o)?;
        fs.gate = Some(gate);
        if let Some(p) = &opts.rtdev {
            // Realtime files' data is written there.
            fs.rt = Some(open_rtdev_writable(p, &fs.geo)?);
        }
        if matches!(fs.log_state, LogState::Dirty(_)) && fs.log_is_clean_by_kernel_rules() {
            fs.log_state = LogState::Clean;
        }
        if matches!(fs.log_state, LogState::Dirty(_)) && resume.is_none() {
            return Err(Error::Unsupported(
                "writing to a filesystem whose log still needs recovery".into(),
            ));
        }
        if resume.is_none() && fs.log_state == LogState::External {
            return Err(Error::Unsupported(format!(
                "writing to a filesystem with an external log: {}",
                crate::log::NEEDS_LOGDEV.trim_start_matches("the filesystem has an external log: ")
            )));
        }
        if resume.is_none() && !matches!(fs.log_state, LogState::Clean | LogState::Empty) {
            return Err(Error::Unsupported(
                "writing to a filesystem with an unreadable log".into(),
            ));
        }
        let mut sb = vec![0u8; fs.geo.sect_size as usize];
        fs.dev.read_at(&mut sb, 0)?;
        fs.base = SbCounters {
            icount: crate::bytes::be64(&sb, SB_ICOUNT_OFF),
            ifree: crate::bytes::be64(&sb, SB_IFREE_OFF),
            fdblocks: crate::bytes::be64(&sb, SB_FDBLOCKS_OFF),
        };
        let mut ws = WriteState::new();
        ws.quota.chkd = std::sync::atomic::AtomicU16::new(
            crate::bytes::be16(&sb, xfs_format::sb::XFS_SB_QFLAGS_OFF)
                & xfs_format::sb::XFS_ALL_QUOTA_CHKD,
        );
        if fs.geo.qflags & xfs_format::sb::XFS_ALL_QUOTA_ACCT != 0 {
            ws.quota.acct = Some(crate::quota::acct::Acct::open(&fs));
        }
        ws.alloc.filestreams.all = opts.filestreams;
        if let Some((meta, data)) = opts.pending_limits {
            ws.dirty_limit = meta.max(1);
            ws.data_limit = data.max(1);
        }
        if let Some((pos, tail)) = resume {
            let (start, _) = crate::log::log_region(fs.dev.as_ref(), &fs.geo)?;
            ws.set_journal(crate::log::journal::Journal::resume(
                &fs.geo, start, pos, tail,
            )?);
        } else if !opts.no_journal {
            let pos = crate::log::head_pos(&fs)?.ok_or_else(|| {
                Error::Unsupported("journaling into a log whose head was not found".into())
            })?;
            let (start, _) = crate::log::log_region(fs.dev.as_ref(), &fs.geo)?;
            ws.set_journal(crate::log::journal::Journal::new(&fs.geo, start, pos)?);
        }
        fs.write = Some(ws);
        Ok(fs)
    }

    /// Writes every committed change to the log and flushes it, without
    /// writing anything in place: after this returns, the changes survive
    /// a crash (the kernel's or `xfskit recover`'s log replay brings them
    /// back). Without a journal, the same as [`Fs::sync`].
    pub fn force_log(&self) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        if !ws.journaled() {
            return self.sync();
        }
        ws.force_log(self.dev.as_ref())
    }

    /// Shuts the filesystem down, as XFS_IOC_GOINGDOWN does: what was
    /// committed is made durable first (pending file data written in
    /// place, then the log forced, as fsync does for every inode), then
    /// every read and write of the device fails with EIO, and so does
    /// every change. Nothing more reaches the device, so the log stays
    /// dirty: the next mount (the kernel's or xfskit's) replays it. The
    /// error of that last flush, if any, is returned; the filesystem is
    /// down either way.
    pub fn shut_down(&self) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        let flushed = if ws.journaled() {
            ws.flush_data(self.dev.as_ref())
                .and_then(|()| ws.force_log(self.dev.as_ref()))
                .and_then(|()| Ok(self.dev.flush()?))
        } else {
            Ok(())
        };
        if let Some(g) = &self.gate {
            g.close();
        }
        flushed
    }

    /// True once [`Fs::shut_down`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.is_closed())
    }

    /// Makes the changes to inode `ino` durable: pending file data is
    /// written in place, and the log is forced when the committed list
    /// holds the inode (the whole list then, as the kernel forces its log
    /// up to the inode's last change); an inode whose last change is in a
    /// checkpoint on disk already costs no log write.
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        if !ws.journaled() {
            return self.sync();
        }
        ws.flush_data(self.dev.as_ref())?;
        let off = self.geo.ino_to_bytes(ino);
        ws.force_log_for(self.dev.as_ref(), Some(off))?;
        self.dev.flush()?;
        Ok(())
    }

    /// What the log writer wrote so far (zeros without a journal).
    pub fn log_stats(&self) -> crate::log::LogStats {
        self.write
            .as_ref()
            .map(|w| w.log_stats())
            .unwrap_or_default()
    }

    /// Starts a transaction. Fails on a filesystem opened read-only.
    pub fn trans(&self) -> Result<Trans<'_>> {
        let ws = self.write_state()?;
        Ok(Trans::new(self, ws))
    }

    /// True when opened for writing.
    pub fn is_writable(&self) -> bool {
        self.write.is_some()
    }

    /// Free data blocks as the superblock counted them at open plus what
    /// transactions changed since: a cheap estimate (the AGs hold the
    /// exact count), 0 when read-only.
    pub fn free_blocks(&self) -> u64 {
        match &self.write {
            Some(ws) => self
                .base
                .fdblocks
                .saturating_add_signed(ws.counters().fdblocks),
            None => 0,
        }
    }

    /// Queues file data for writing at byte offset `off` (adjacent
    /// writes are combined).
    pub fn write_data(&self, off: u64, data: &[u8]) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.write_data(&self.dev, off, data)
    }

    /// [`Fs::write_data`] for bytes in a vector handed over (whole blocks),
    /// queued as they are.
    pub fn write_data_vec(&self, off: u64, v: Vec<u8>) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.write_data_vec(&self.dev, off, v)
    }

    /// [`Fs::write_data`] for a piece of a shared buffer, queued where it
    /// lies with its zero padding, then `zeros` more zero bytes (at most
    /// [`crate::dev::aligned::ZEROS_MAX`]).
    pub fn write_data_shared(
        &self,
        off: u64,
        b: crate::dev::SharedBytes,
        zeros: usize,
    ) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.write_data_shared(&self.dev, off, b, zeros)
    }

    /// [`Fs::write_data`] for bytes in an aligned buffer, queued as they are.
    pub fn write_data_owned(&self, off: u64, buf: crate::dev::AlignedBuf) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.write_data_owned(&self.dev, off, buf)
    }

    /// Writes every committed change back to the device, sorted and
    /// merged (but does not flush the device cache).
    pub fn writeback(&self) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.writeback(self.dev.as_ref())
    }

    /// Starts writing every committed change back on a writer thread; the
    /// changes stay readable meanwhile. The next writeback or sync waits
    /// for it.
    pub(crate) fn writeback_background(&self) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.writeback_background(&self.dev)
    }

    /// Writes everything back, updates the superblock counters and makes
    /// it durable. The filesystem is clean afterwards.
    pub fn sync(&self) -> Result<()> {
        let ws = self.write.as_ref().ok_or(Error::ReadOnly)?;
        ws.writeback(self.dev.as_ref())?;
        let d = ws.counters();
        let apply = |base: u64, delta: i64| -> Result<u64> {
            base.checked_add_signed(delta).ok_or_else(|| {
                Error::corrupt(
                    "superblock",
                    Location::Sb(0),
                    "a counter would go out of range",
                )
            })
        };
        let mut sb = vec![0u8; self.geo.sect_size as usize];
        self.dev.read_at(&mut sb, 0)?;
        sb[SB_ICOUNT_OFF..SB_ICOUNT_OFF + 8]
            .copy_from_slice(&apply(self.base.icount, d.icount)?.to_be_bytes());
        sb[SB_IFREE_OFF..SB_IFREE_OFF + 8]
            .copy_from_slice(&apply(self.base.ifree, d.ifree)?.to_be_bytes());
        sb[SB_FDBLOCKS_OFF..SB_FDBLOCKS_OFF + 8]
            .copy_from_slice(&apply(self.base.fdblocks, d.fdblocks)?.to_be_bytes());
        xfs_format::crc::stamp(&mut sb, xfs_format::sb::XFS_SB_CRC_OFF);
        self.dev.write_at(&sb, 0)?;
        self.dev.flush()?;
        // Everything is in place: the log is clean again.
        ws.unmount_log(self.dev.as_ref())?;
        Ok(())
    }

    /// Write-side state (None when opened read-only).
    pub(crate) fn write_state(&self) -> Result<&WriteState> {
        if self.is_shut_down() {
            return Err(Error::Io(crate::dev::gate_error()));
        }
        self.write.as_ref().ok_or(Error::ReadOnly)
    }

    /// Writes issued so far (zero when read-only).
    pub fn write_stats(&self) -> WriteStats {
        self.write.as_ref().map(|w| w.stats()).unwrap_or_default()
    }

    /// Forgets a cached buffer (it was changed or freed).
    pub(crate) fn invalidate_cached(&self, daddr: Daddr, len: u32) {
        self.cache.invalidate((daddr.0, len));
    }

    /// Opens a filesystem on any device. Its root inode must be a
    /// directory (unless [`OpenOptions::any_root`]).
    pub fn from_device(dev: Box<dyn Device>, opts: &OpenOptions) -> Result<Fs> {
        let fs = Self::open_device(dev, opts)?;
        if !opts.any_root {
            fs.check_root()?;
        }
        Ok(fs)
    }

    /// Refuses a root inode number that is no inode, or whose inode cannot
    /// be read or is not a directory, as the kernel's mount does.
    fn check_root(&self) -> Result<()> {
        let root = self.geo.root_ino;
        let bad = |d: String| Error::corrupt("superblock", Location::Sb(0), d);
        if !self.geo.ino_valid(root) {
            return Err(bad(format!(
                "root inode {} is outside the filesystem",
                root.0
            )));
        }
        match self.inode(root) {
            Ok(i) if i.file_type == crate::inode::FileType::Dir => Ok(()),
            Ok(i) => Err(bad(format!(
                "root inode {} is a {:?}, not a directory",
                root.0, i.file_type
            ))),
            // A damaged root inode block is reported by whatever reads it,
            // with its own location.
            Err(Error::BadCrc { .. }) => Ok(()),
            Err(e) => Err(bad(format!("root inode {} cannot be read: {e}", root.0))),
        }
    }

    fn open_device(dev: Box<dyn Device>, opts: &OpenOptions) -> Result<Fs> {
        let dev: Box<dyn Device> = match &opts.logdev {
            Some(p) if dev.log_base().is_none() => Box::new(crate::log::recover::Shared(
                with_logdev(Arc::from(dev), p, false)?,
            )),
            _ => dev,
        };
        let mut sector = vec![0u8; 512];
        dev.read_at(&mut sector, 0)
            .map_err(|e| short_device(e, dev.len()))?;
        // The sector size is in the first sector; re-read the whole sector for the CRC.
        let sectsize = u16::from_be_bytes([sector[102], sector[103]]);
        if sectsize.is_power_of_two() && sectsize > 512 && u64::from(sectsize) <= dev.len() {
            sector = vec![0u8; usize::from(sectsize)];
            dev.read_at(&mut sector, 0)?;
        }
        let geo = Geometry::from_superblock(&sector)?;
        // A zoned realtime section inside the data device ends the device.
        let end_blocks = if geo.rt_internal() {
            geo.rt_start.saturating_add(geo.rt_blocks)
        } else {
            geo.data_blocks
        };
        let need = end_blocks.saturating_mul(u64::from(geo.block_size));
        if dev.len() < need {
            return Err(Error::corrupt(
                "device",
                Location::Sb(0),
                format!(
                    "the device has {} bytes but the filesystem needs {need}",
                    dev.len()
                ),
            ));
        }
        let rt = match &opts.rtdev {
            Some(p) => Some(open_rtdev(p, &geo)?),
            None => None,
        };
        let cache_bytes = if opts.cache_bytes == 0 {
            256 << 20
        } else {
            opts.cache_bytes
        };
        let mut fs = Fs {
            dev: dev.into(),
            rt,
            geo,
            cache: BufCache::new(cache_bytes),
            log_state: LogState::Clean,
            write: None,
            base: SbCounters::default(),
            recovery: None,
            unreplayed: None,
            lsn_limit: std::sync::atomic::AtomicU64::new(0),
            lsn_ahead: std::sync::Mutex::new(None),
            gate: None,
        };
        fs.log_state = crate::log::inspect(&fs)?;
        if matches!(fs.log_state, LogState::Dirty(_)) && !opts.norecovery {
            return fs.replayed_in_memory(opts);
        }
        Ok(fs)
    }

    /// The filesystem as the log's replay leaves it, seen through an
    /// overlay of the replayed blocks: the device is not written.
    fn replayed_in_memory(self, opts: &OpenOptions) -> Result<Fs> {
        let rec = crate::log::replay(self.dev.as_ref(), &self.geo)?;
        let ends = &rec.contents.ends;
        if ends.clean || ends.empty {
            // The quick look at open and the kernel's head and tail search
            // disagree: the latter decides.
            let mut fs = self;
            fs.log_state = LogState::Clean;
            return Ok(fs);
        }
        let dev: Arc<dyn Device> = Arc::new(crate::dev::OverlayDevice::new(
            self.dev.clone(),
            rec.overlay,
        ));
        // What the kernel does after replay (a clean log, the unlinked
        // inodes freed) also goes to the overlay.
        // Intents are finished only when every one can be.
        let others = rec
            .stats
            .unfinished_intents
            .iter()
            .any(|(t, _, _)| !crate::log::intents::can_finish(t));
        let intents = crate::log::intents::unfinished(&rec.contents.transactions)?;
        crate::log::intents::check_attris(&rec.contents.transactions, &self.geo)?;
        let intents = if others || crate::log::intents::check_ruis(&intents).is_err() {
            Vec::new()
        } else {
            intents
        };
        crate::log::recover::finish(dev.clone(), &rec.contents.ends, &intents, false)?;
        let o = OpenOptions {
            norecovery: true,
            ..opts.clone()
        };
        let mut fs = Fs::from_device(Box::new(crate::log::recover::Shared(dev)), &o)?;
        fs.log_state = self.log_state;
        fs.recovery = Some(rec.stats);
        fs.unreplayed = Some(self.dev.clone());
        Ok(fs)
    }

    /// From now on, notes metadata read from the device whose LSN is at or
    /// past `head` (the log head, `cycle << 32 | block`), as libxfs's read
    /// verifiers do for xfs_repair, which then reformats the log (the
    /// kernel refuses such blocks). Blocks already cached are not looked
    /// at again. See [`Fs::lsn_ahead`].
    pub fn watch_lsns(&self, head: u64) {
        self.lsn_limit
            .store(head, std::sync::atomic::Ordering::Relaxed);
    }

    /// The newest metadata LSN read at or past the head given to
    /// [`Fs::watch_lsns`], if any.
    pub fn lsn_ahead(&self) -> Option<LsnAhead> {
        self.lsn_ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn note_lsn_ahead(&self, lsn: u64, what: &'static str, location: Location) {
        let mut a = self.lsn_ahead.lock().unwrap_or_else(|p| p.into_inner());
        let newer = |old: u64| {
            let key = |l: u64| ((l >> 32) as i32, l as u32 as i32);
            key(lsn) > key(old)
        };
        match &mut *a {
            Some(o) => {
                o.blocks += 1;
                if newer(o.lsn) {
                    (o.lsn, o.what, o.location) = (lsn, what, location);
                }
            }
            None => {
                *a = Some(LsnAhead {
                    lsn,
                    what,
                    location,
                    blocks: 1,
                })
            }
        }
    }

    /// True when the kernel's head and tail search finds the log clean
    /// (or never written).
    fn log_is_clean_by_kernel_rules(&self) -> bool {
        crate::log::log_dev(self.dev.as_ref(), &self.geo)
            .and_then(|l| crate::log::find::find_ends(&l))
            .is_ok_and(|e| e.clean || e.empty)
    }

    /// What the in-memory replay of a dirty log did, when there was one.
    pub fn recovery(&self) -> Option<&crate::log::ReplayStats> {
        self.recovery.as_ref()
    }

    /// When a dirty log was replayed in memory at open: the filesystem as
    /// the device holds it, before the log (read-only, `norecovery`). What
    /// the log changed last is older there, which is what forensic work
    /// wants of blocks and inodes that were freed.
    pub fn before_log(&self) -> Option<Result<Fs>> {
        let dev = self.unreplayed.clone()?;
        let opts = OpenOptions {
            norecovery: true,
            any_root: true,
            ..Default::default()
        };
        Some(Fs::from_device(
            Box::new(crate::log::recover::Shared(dev)),
            &opts,
        ))
    }

    /// The validated geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// What the log looked like when the filesystem was opened.
    pub fn log_state(&self) -> &LogState {
        &self.log_state
    }

    /// The device.
    pub fn device(&self) -> &dyn Device {
        self.dev.as_ref()
    }

    /// Reads raw bytes from the device.
    pub fn read_bytes(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(w) = &self.write {
            // File data may still sit in the write combiner: read from
            // there when one pending run holds it all, else write what is
            // pending first.
            if w.read_pending(off, buf) {
                return Ok(());
            }
            w.flush_data(self.dev.as_ref())?;
        }
        self.dev.read_at(buf, off).map_err(Error::Io)
    }

    /// As [`Fs::read_bytes`] into memory that may not be initialized yet;
    /// every byte is on success.
    pub fn read_bytes_uninit(&self, off: u64, buf: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
        if self.write.is_some() {
            return self.read_bytes(off, crate::dev::zeroed(buf));
        }
        self.dev.read_uninit_at(buf, off).map_err(Error::Io)
    }

    /// The realtime device, when it was given.
    pub fn rt_device(&self) -> Option<&dyn Device> {
        self.rt.as_deref()
    }

    /// True when realtime data can be read: the realtime device was given,
    /// or the (zoned) realtime section is inside the data device.
    pub fn rt_readable(&self) -> bool {
        self.rt.is_some() || self.geo.rt_internal()
    }

    /// Writes bytes to the realtime device at byte `off` (realtime files'
    /// data; see [`crate::namespace`]'s realtime write path).
    pub(crate) fn write_rt_bytes(&self, off: u64, buf: &[u8]) -> Result<()> {
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| Error::Unsupported("needs the realtime device: --rtdev".into()))?;
        rt.write_at(buf, off).map_err(Error::Io)
    }

    /// Makes the realtime device's writes durable.
    pub(crate) fn flush_rt(&self) -> Result<()> {
        match &self.rt {
            Some(rt) => rt.flush().map_err(Error::Io),
            None => Ok(()),
        }
    }

    /// Reads raw bytes of the realtime device at byte `off` (realtime
    /// block `b` is at `b * block_size`); without the device, the error
    /// says it is needed, naming inode `ino` whose data is read.
    pub fn read_rt_bytes(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<()> {
        if self.geo.rt_internal() {
            return self.read_bytes(off, buf);
        }
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| crate::inode::needs_rtdev(ino))?;
        rt.read_at(buf, off).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupt(
                    "realtime data",
                    Location::Inode(ino),
                    format!(
                        "{} bytes at byte {off} lie past the end of the realtime device",
                        buf.len()
                    ),
                )
            } else {
                Error::Io(e)
            }
        })
    }

    /// Reads a metadata block of `len` bytes at `daddr`, checks it with
    /// `verifier` (CRC first, then structure) and caches it.
    pub fn read_meta(&self, daddr: Daddr, len: u32, verifier: &Verifier<'_>) -> Result<Arc<[u8]>> {
        let key = (daddr.0, len);
        if let Some(w) = &self.write {
            if let Some(b) = w.get(daddr.bytes(), len as usize) {
                return Ok(b);
            }
        }
        if let Some(b) = self.cache.get(key) {
            // Cached buffers were verified, but the same block may be read
            // under another identity (a cross-linked block): check again
            // cheaply without the CRC.
            verifier.check_structure(&self.geo, daddr, &b)?;
            return Ok(b);
        }
        let mut buf = vec![0u8; len as usize];
        self.dev.read_at(&mut buf, daddr.bytes()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupt(
                    verifier.what(),
                    Location::Daddr(daddr.0),
                    "block lies past the end of the device",
                )
            } else {
                Error::Io(e)
            }
        })?;
        verifier.check(&self.geo, daddr, &buf)?;
        let head = self.lsn_limit.load(std::sync::atomic::Ordering::Relaxed);
        if head != 0 {
            if let Some((lsn, location)) = verifier.lsn_ahead(&self.geo, daddr, &buf, head) {
                self.note_lsn_ahead(lsn, verifier.what(), location);
            }
        }
        let b: Arc<[u8]> = buf.into();
        self.cache.insert(key, b.clone());
        Ok(b)
    }

    /// Reads and decodes inode `ino`.
    pub fn inode(&self, ino: Ino) -> Result<Inode> {
        crate::inode::read_inode(self, ino)
    }

    /// Reads the root directory inode.
    pub fn root(&self) -> Result<Inode> {
        self.inode(self.geo.root_ino)
    }
}

/// Byte offsets of the lazily kept counters in the superblock.
const SB_ICOUNT_OFF: usize = std::mem::offset_of!(xfs_format::sb::Dsb, sb_icount);
const SB_IFREE_OFF: usize = std::mem::offset_of!(xfs_format::sb::Dsb, sb_ifree);
const SB_FDBLOCKS_OFF: usize = std::mem::offset_of!(xfs_format::sb::Dsb, sb_fdblocks);

/// Committed but unwritten bytes of an inode, if any (write mode).
pub(crate) fn pending_inode(fs: &Fs, off: u64, len: usize) -> Option<Arc<[u8]>> {
    fs.write.as_ref().and_then(|w| w.get(off, len))
}

/// Opens the realtime device at `path` for a filesystem of geometry `geo`:
/// the filesystem must have a realtime section, the device must hold all
/// of it and, with realtime groups, start with this filesystem's realtime
/// superblock.
fn open_rtdev(path: &Path, geo: &Geometry) -> Result<Arc<dyn Device>> {
    if geo.rt_blocks == 0 {
        return Err(Error::Invalid(format!(
            "a realtime device was given ({}), but the filesystem has no realtime section",
            path.display()
        )));
    }
    if geo.rt_internal() {
        return Err(Error::Invalid(format!(
            "a realtime device was given ({}), but the filesystem's zoned realtime section is inside the data device (from block {})",
            path.display(),
            geo.rt_start
        )));
    }
    let dev = FileDevice::open_read_only(path).map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("the realtime device {}: {e}", path.display()),
        ))
    })?;
    let need = geo.rt_blocks.saturating_mul(u64::from(geo.block_size));
    if dev.len() < need {
        return Err(Error::Invalid(format!(
            "the realtime device {} has {} bytes, but the realtime section needs {need} ({} blocks of {} bytes)",
            path.display(),
            dev.len(),
            geo.rt_blocks,
            geo.block_size
        )));
    }
    if geo.has_rtgroups() && !geo.zoned {
        crate::rtgroup::require_rtsb(path, geo, &dev)?;
    }
    Ok(Arc::new(dev))
}

/// `dev` with the external log device at `path` beside it
/// ([`crate::dev::WithLog`]); checked against the superblock on `dev`:
/// the filesystem's log must be external, the device must hold all of
/// it, and a record header at its start must name this filesystem.
fn with_logdev(dev: Arc<dyn Device>, path: &Path, writable: bool) -> Result<Arc<dyn Device>> {
    let geo = crate::log::recover::read_geometry(dev.as_ref())?;
    if geo.log_start.0 != 0 {
        return Err(Error::Invalid(format!(
            "a log device was given ({}), but the filesystem's log is internal (at fs block {})",
            path.display(),
            geo.log_start.0
        )));
    }
    let open = if writable {
        FileDevice::open_read_write(path)
    } else {
        FileDevice::open_read_only(path)
    };
    let log = open.map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("the log device {}: {e}", path.display()),
        ))
    })?;
    let need = u64::from(geo.log_blocks) * u64::from(geo.block_size);
    if log.len() < need {
        return Err(Error::Invalid(format!(
            "the log device {} has {} bytes, but the log needs {need} ({} blocks of {} bytes)",
            path.display(),
            log.len(),
            geo.log_blocks,
            geo.block_size
        )));
    }
    if let Some(other) = crate::log::first_record_uuid(&log)? {
        if other != geo.uuid {
            return Err(Error::Invalid(format!(
                "the log device {} holds the log of another filesystem (its records name UUID {}, this filesystem is {})",
                path.display(),
                crate::bytes::uuid_string(&other),
                crate::bytes::uuid_string(&geo.uuid)
            )));
        }
    }
    Ok(Arc::new(crate::dev::WithLog::new(dev, Arc::new(log))))
}

/// The realtime device opened for writing (checked as [`open_rtdev`]).
fn open_rtdev_writable(path: &Path, geo: &Geometry) -> Result<Arc<dyn Device>> {
    open_rtdev(path, geo)?;
    let dev = FileDevice::open_read_write(path).map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("the realtime device {}: {e}", path.display()),
        ))
    })?;
    Ok(Arc::new(dev))
}

fn short_device(e: std::io::Error, len: u64) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::corrupt(
            "superblock",
            Location::Sb(0),
            format!("the device is only {len} bytes long"),
        )
    } else {
        Error::Io(e)
    }
}
