//! Transactions: every change to metadata is made inside a [`Trans`].
//!
//! A transaction reads buffers into private copies ([`Trans::read_buf`],
//! [`Trans::get_buf`] for new blocks), changes them, records changed
//! inodes ([`Trans::log_inode`]) and counter deltas, and then either
//! commits (CRCs stamped, buffers published to the filesystem's pending
//! set, counters applied) or is dropped (nothing happened). The set of
//! buffers a commit publishes is exactly what a future log writer must
//! write to the journal, so each transaction must stay bounded (a few
//! dozen blocks: one name, one extent, one inode chunk).
//!
//! Locks: a transaction takes AG locks (always in increasing AG order)
//! and inode locks; they are released at commit or drop. Work in
//! different AGs never serializes.

mod clock;
mod combiner;
mod counters;
mod datarun;
mod dirty;
mod flight;
mod generations;
mod locks;
mod log_handle;
mod pending;
mod policy;
mod quota_state;
mod state;
mod writeback;

pub use clock::Clock;
pub use counters::SbDelta;
pub use locks::LockSet;
pub(crate) use pending::{After, Commit};
pub use pending::{Pending, WriteStats};
pub use policy::AllocPolicy;
pub use state::WriteState;

use crate::buf::fasthash::FastMap;
use crate::buf::Verifier;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{AgNumber, Daddr, Geometry, Ino};
use crate::inode::Inode;
use crate::log::cil::DirtyMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A buffer held by a transaction.
pub type BufId = usize;

/// Buffer contents: shared with the pending set or cache until changed,
/// then a private copy (an `Arc` nobody else holds, so that commit hands
/// it to the pending set without copying again).
enum Data {
    Shared(Arc<[u8]>),
    Owned(Arc<[u8]>),
}

/// A zeroed buffer of `len` bytes, allocated once.
fn zeroed(len: usize) -> Arc<[u8]> {
    std::iter::repeat_n(0u8, len).collect()
}

struct TBuf {
    off: u64,
    data: Data,
    /// The bytes as read, before this transaction changed them (None: a
    /// new block, logged whole).
    orig: Option<Arc<[u8]>>,
    crc_off: Option<usize>,
    dirty: bool,
    stale: bool,
    /// The log's buffer type, for blocks with no magic number to tell it
    /// (realtime bitmap and summary; None: by magic).
    kind: Option<crate::log::buftype::BufKind>,
    /// A block of dquot records: each changed record is logged as a
    /// dquot item, not the buffer.
    dquot: bool,
}

/// A set of changes that is committed whole or not at all.
pub struct Trans<'a> {
    fs: &'a Fs,
    ws: &'a WriteState,
    bufs: Vec<TBuf>,
    index: FastMap<u64, BufId>,
    inodes: BTreeMap<u64, Arc<[u8]>>,
    delta: SbDelta,
    ag_locks: Vec<u32>,
    inode_locks: Vec<u64>,
    freed: Vec<(u64, u64)>,
    allocated: Vec<(u64, u64)>,
    unshared: Vec<(u64, u64)>,
    /// New full inode chunks (icreate items) and the inodes they cover
    /// while those stay as the chunk made them.
    icreates: Vec<crate::log::item_inode::Icreate>,
    covered: crate::buf::fasthash::FastSet<u64>,
    /// Intent and done items this transaction logs, in order (each its
    /// regions, the format region first).
    done: Vec<Vec<Vec<u8>>>,
    /// Where a new directory's inode search starts, instead of the next
    /// AG of the rotor (see [`Trans::start_dirs_at`]).
    dir_start: Option<u32>,
    /// With quotas kept exact: what each inode logged counted for before
    /// this transaction (see `quota::acct`).
    qbefore: BTreeMap<u64, crate::quota::acct::Use>,
    /// Realtime blocks each realtime inode gained (lost: negative).
    qrt: BTreeMap<u64, i64>,
    /// Inodes whose `di_next_unlinked` this transaction changed (see
    /// [`Trans::log_unlinked`]).
    unlinked: Vec<u64>,
    /// Quota limits may refuse this transaction (not a step of an
    /// operation that cannot stop half-way).
    quota_limits: bool,
}

impl<'a> Trans<'a> {
    pub(crate) fn new(fs: &'a Fs, ws: &'a WriteState) -> Trans<'a> {
        Trans {
            fs,
            ws,
            bufs: Vec::new(),
            index: FastMap::default(),
            inodes: BTreeMap::new(),
            delta: SbDelta::default(),
            ag_locks: Vec::new(),
            inode_locks: Vec::new(),
            freed: Vec::new(),
            allocated: Vec::new(),
            unshared: Vec::new(),
            icreates: Vec::new(),
            covered: Default::default(),
            done: Vec::new(),
            dir_start: None,
            qbefore: BTreeMap::new(),
            qrt: BTreeMap::new(),
            unlinked: Vec::new(),
            quota_limits: true,
        }
    }

    /// Makes the next directory inode this transaction allocates start
    /// its search in AG `agno` (taken earlier with [`Fs::next_dir_ag`])
    /// instead of advancing the directory rotor.
    pub fn start_dirs_at(&mut self, agno: u32) {
        self.dir_start = Some(agno);
    }

    /// The AG set by [`Trans::start_dirs_at`], once.
    pub(crate) fn take_dir_start(&mut self) -> Option<u32> {
        self.dir_start.take()
    }

    /// The filesystem.
    pub fn fs(&self) -> &'a Fs {
        self.fs
    }

    /// The filesystem's geometry.
    pub fn geo(&self) -> &'a Geometry {
        self.fs.geometry()
    }

    /// Locks AG `agno` until commit or drop (no-op if already held).
    /// Take AG locks in increasing order.
    pub fn lock_ag(&mut self, agno: AgNumber) {
        if !self.ag_locks.contains(&agno.0) {
            self.ws.ags.lock(u64::from(agno.0));
            self.ag_locks.push(agno.0);
        }
    }

    /// Locks AG `agno` only if that does not wait (for going back to a
    /// lower AG than one already held). True when held afterwards.
    pub fn try_lock_ag(&mut self, agno: AgNumber) -> bool {
        if self.ag_locks.contains(&agno.0) {
            return true;
        }
        if self.ws.ags.try_lock(u64::from(agno.0)) {
            self.ag_locks.push(agno.0);
            return true;
        }
        false
    }

    /// The highest AG whose lock this transaction holds.
    pub fn highest_ag(&self) -> Option<AgNumber> {
        self.ag_locks.iter().max().map(|&a| AgNumber(a))
    }

    /// True when this transaction holds AG `agno`'s lock.
    pub fn holds_ag(&self, agno: AgNumber) -> bool {
        self.ag_locks.contains(&agno.0)
    }

    /// Locks inode `ino` until commit or drop (no-op if already held).
    pub fn lock_inode(&mut self, ino: Ino) {
        if !self.inode_locks.contains(&ino.0) {
            self.ws.inodes.lock(ino.0);
            self.inode_locks.push(ino.0);
        }
    }

    /// Reads (or finds in this transaction) the metadata block of `len`
    /// bytes at `daddr`, verified by `verifier`. The CRC is re-stamped at
    /// commit if the buffer is changed.
    pub fn read_buf(&mut self, daddr: Daddr, len: u32, verifier: &Verifier<'_>) -> Result<BufId> {
        let off = daddr.bytes();
        if let Some(&id) = self.index.get(&off) {
            let b = &self.bufs[id];
            if b.len() != len as usize {
                return Err(Error::Invalid(format!(
                    "buffer at daddr {} joined with {} bytes, asked for {len}",
                    daddr.0,
                    b.len()
                )));
            }
            if b.stale {
                return Err(Error::Invalid(format!(
                    "buffer at daddr {} was freed in this transaction",
                    daddr.0
                )));
            }
            return Ok(id);
        }
        let data = self.fs.read_meta(daddr, len, verifier)?;
        Ok(self.join(off, Data::Shared(data), verifier.crc_offset(), false))
    }

    /// Reads (or finds in this transaction) `len` bytes at `daddr` that
    /// carry no verifiable header (realtime bitmap and summary blocks, the
    /// superblock sector), logged as buffer type `kind`; `crc_off` is where
    /// a CRC is stamped at writeback (None: none).
    pub(crate) fn read_raw_buf(
        &mut self,
        daddr: Daddr,
        len: u32,
        kind: crate::log::buftype::BufKind,
        crc_off: Option<usize>,
    ) -> Result<BufId> {
        let off = daddr.bytes();
        if let Some(&id) = self.index.get(&off) {
            if self.bufs[id].len() != len as usize || self.bufs[id].stale {
                return Err(Error::Invalid(format!(
                    "buffer at daddr {} joined twice with different sizes or freed",
                    daddr.0
                )));
            }
            return Ok(id);
        }
        let data: Arc<[u8]> = match self.ws.get(off, len as usize) {
            Some(b) => b,
            None => {
                let mut v = vec![0u8; len as usize];
                self.fs.read_bytes(off, &mut v)?;
                v.into()
            }
        };
        let id = self.join(off, Data::Shared(data), crc_off, false);
        self.bufs[id].kind = Some(kind);
        Ok(id)
    }

    /// A new, zeroed buffer for a block that is being initialised (not
    /// read from disk). `crc_off` is where its CRC goes (None: no CRC).
    pub fn get_buf(&mut self, daddr: Daddr, len: u32, crc_off: Option<usize>) -> BufId {
        let off = daddr.bytes();
        if let Some(&id) = self.index.get(&off) {
            let b = &mut self.bufs[id];
            b.data = Data::Owned(zeroed(len as usize));
            b.orig = None;
            b.crc_off = crc_off;
            b.dirty = true;
            b.stale = false;
            return id;
        }
        self.join(off, Data::Owned(zeroed(len as usize)), crc_off, true)
    }

    fn join(&mut self, off: u64, data: Data, crc_off: Option<usize>, dirty: bool) -> BufId {
        let id = self.bufs.len();
        let orig = match &data {
            Data::Shared(a) => Some(a.clone()),
            Data::Owned(_) => None,
        };
        self.bufs.push(TBuf {
            off,
            data,
            orig,
            crc_off,
            dirty,
            stale: false,
            kind: None,
            dquot: false,
        });
        self.index.insert(off, id);
        id
    }

    /// Sets the log's buffer type of a held buffer (blocks whose magic
    /// number does not tell it).
    pub(crate) fn set_buf_kind(&mut self, id: BufId, kind: crate::log::buftype::BufKind) {
        self.bufs[id].kind = Some(kind);
    }

    /// The contents of a held buffer.
    pub fn buf(&self, id: BufId) -> &[u8] {
        self.bufs[id].bytes()
    }

    /// The contents of a held buffer, for changing (marks it dirty).
    pub fn buf_mut(&mut self, id: BufId) -> &mut [u8] {
        let b = &mut self.bufs[id];
        b.dirty = true;
        if let Data::Shared(a) = &b.data {
            b.data = Data::Owned(Arc::from(&a[..]));
        }
        match &mut b.data {
            // Owned copies are made here or by get_buf and never shared
            // before commit.
            Data::Owned(v) => Arc::get_mut(v).expect("a transaction's own copy is unshared"),
            Data::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// Disk address of a held buffer.
    pub fn buf_daddr(&self, id: BufId) -> Daddr {
        Daddr(self.bufs[id].off >> 9)
    }

    /// Marks a held buffer's block as freed: it is not written, and any
    /// pending copy is dropped at commit.
    pub fn stale_buf(&mut self, id: BufId) {
        let b = &mut self.bufs[id];
        b.stale = true;
        b.dirty = false;
    }

    /// Forgets everything pending for the `bytes` bytes from `daddr`
    /// (freed blocks): buffers this transaction holds there become stale,
    /// inodes it logged there are dropped, and at commit the filesystem's
    /// pending copies in the range are dropped before this transaction's
    /// own new buffers are published.
    pub fn forget_range(&mut self, daddr: Daddr, bytes: u64) {
        let lo = daddr.bytes();
        let hi = lo + bytes;
        for b in &mut self.bufs {
            if b.off >= lo && b.off < hi {
                b.stale = true;
                b.dirty = false;
            }
        }
        let geo = self.fs.geometry();
        self.inodes.retain(|&ino, _| {
            let off = geo.ino_to_bytes(Ino(ino));
            off < lo || off >= hi
        });
        self.freed.push((lo, hi));
    }

    /// True when this transaction freed any of bytes `lo..hi`.
    pub(crate) fn freed_here(&self, lo: u64, hi: u64) -> bool {
        self.freed.iter().any(|&(a, b)| a < hi && lo < b)
    }

    /// Records that bytes `lo..hi` were allocated to file data (their data
    /// reaches the disk ahead of the checkpoint that allocates them).
    pub(crate) fn note_data_alloc(&mut self, lo: u64, hi: u64) {
        self.allocated.push((lo, hi));
    }

    /// Records that bytes `lo..hi` lost an owner (a reference count
    /// dropped): until this transaction's checkpoint is on disk, the disk
    /// still gives them to that owner too, so file data written there in
    /// place must wait for the checkpoint.
    pub(crate) fn note_unshared(&mut self, lo: u64, hi: u64) {
        self.unshared.push((lo, hi));
    }

    /// Reads inode `ino` as this transaction sees it.
    pub fn read_inode(&mut self, ino: Ino) -> Result<Inode> {
        if let Some(raw) = self.inodes.get(&ino.0) {
            return Inode::decode(self.geo(), ino, raw);
        }
        self.fs.inode(ino)
    }

    /// Records the new state of an inode; it is written at commit.
    /// Logs a done item (its format region) with this transaction's
    /// changes, so that the intent it names is finished exactly when they
    /// are. Without a journal there is nothing to log it in.
    pub(crate) fn log_done(&mut self, region: Vec<u8>) {
        if self.ws.journaled() {
            self.done.push(vec![region]);
        }
    }

    /// Logs an intent item (its format region) with this transaction's
    /// changes; the log keeps its tail behind it until a later
    /// transaction logs its done item ([`Trans::log_done`]). Without a
    /// journal there is nothing to log it in.
    pub(crate) fn log_intent(&mut self, region: Vec<u8>) {
        if self.ws.journaled() {
            self.done.push(vec![region]);
        }
    }

    /// A new intent id, unique among the intents of the live log.
    pub(crate) fn intent_id(&self) -> u64 {
        self.ws.intent_id()
    }

    /// Logs one item made of `regions` as they are (the first its format
    /// region, whose size field must count them), with no other change:
    /// tests use it to put intents in the log. Without a journal nothing
    /// is logged.
    #[doc(hidden)]
    pub fn log_raw_item(&mut self, regions: Vec<Vec<u8>>) {
        if self.ws.journaled() && !regions.is_empty() {
            self.done.push(regions);
        }
    }

    pub fn log_inode(&mut self, ip: &Inode) -> Result<()> {
        self.note_quota_before(ip.ino);
        let geo = self.geo();
        let mut raw = zeroed(geo.inode_size as usize);
        ip.encode(
            geo,
            Arc::get_mut(&mut raw).expect("a new buffer is unshared"),
        )?;
        self.inodes.insert(ip.ino.0, raw);
        self.covered.remove(&ip.ino.0);
        Ok(())
    }

    /// Notes that inode `ino`'s `di_next_unlinked` changed (it is logged
    /// with [`Trans::log_inode`] too). Recovery takes that field from no
    /// inode item, only from an inode buffer item of the inode's cluster,
    /// so the checkpoint also logs the field's chunk of the cluster as
    /// one (the inode's own new bytes there: what its in-place write puts
    /// in the cluster), as the kernel's unlinked list code logs it.
    pub(crate) fn log_unlinked(&mut self, ino: Ino) {
        if self.ws.journaled() && !self.unlinked.contains(&ino.0) {
            self.unlinked.push(ino.0);
        }
    }

    /// With quotas kept exact, notes what inode `ino` counted for before
    /// this transaction, the first time the transaction logs it: nothing
    /// when its chunk is new here.
    fn note_quota_before(&mut self, ino: Ino) {
        let Some(acct) = self.ws.quota.acct.as_ref().filter(|a| a.exact()) else {
            return;
        };
        if self.qbefore.contains_key(&ino.0) {
            return;
        }
        use crate::quota::acct::Use;
        let u = if self.covered.contains(&ino.0) || self.inodes.contains_key(&ino.0) {
            Use::NONE
        } else {
            match self.fs.inode(ino) {
                // A realtime file whose mapping cannot be read: its
                // share is unknown, and the commit marks the counts so.
                Ok(ip) => Use::of_inode(self.fs, acct, &ip).unwrap_or(Use {
                    rt: true,
                    rtblocks: u64::MAX,
                    ..Use::of_inode_core(acct, &ip)
                }),
                Err(_) => Use::NONE,
            }
        };
        self.qbefore.insert(ino.0, u);
    }

    /// Exempts this transaction (and those it rolls into) from quota
    /// limits: the steps of a mapping exchange, which once its intent is
    /// logged must finish, count their changes but are never refused.
    pub(crate) fn without_quota_limits(&mut self) {
        self.quota_limits = false;
    }

    /// Notes that realtime inode `ino` gained `blocks` realtime blocks
    /// (lost, when negative) in this transaction, for the quotas.
    pub(crate) fn note_rt_blocks(&mut self, ino: Ino, blocks: i64) {
        *self.qrt.entry(ino.0).or_insert(0) += blocks;
    }

    /// Reads (or finds in this transaction) a block of dquot records at
    /// `daddr`; records changed in it are logged as dquot items.
    pub(crate) fn read_dquot_buf(&mut self, daddr: Daddr, len: u32) -> Result<BufId> {
        let kind = crate::log::buftype::BufKind {
            blft: crate::log::buftype::blft::UDQUOT,
            lsn_off: None,
        };
        let id = self.read_raw_buf(daddr, len, kind, None)?;
        self.bufs[id].dquot = true;
        Ok(id)
    }

    /// Records a new full inode chunk whose `n` inodes from `first` were
    /// logged raw as free inodes: the log gets one icreate item instead.
    pub(crate) fn log_icreate(&mut self, c: crate::log::item_inode::Icreate, first: Ino, n: u64) {
        self.icreates.push(c);
        for i in 0..n {
            self.covered.insert(first.0 + i);
        }
    }

    /// Records raw bytes for an inode slot (free inodes of a new chunk).
    /// `raw` must be a whole inode with its CRC stamped.
    pub fn log_inode_raw(&mut self, ino: Ino, raw: Vec<u8>) {
        self.inodes.insert(ino.0, raw.into());
    }

    /// Drops an inode logged in this transaction (its chunk was freed,
    /// so nothing may be written to its slot).
    pub fn unlog_inode(&mut self, ino: Ino) {
        self.inodes.remove(&ino.0);
        self.covered.remove(&ino.0);
    }

    /// Superblock counter deltas of this transaction.
    pub fn delta_mut(&mut self) -> &mut SbDelta {
        &mut self.delta
    }

    /// Number of buffers changed so far (bounded per transaction).
    pub fn dirty_count(&self) -> usize {
        self.bufs.iter().filter(|b| b.dirty).count() + self.inodes.len()
    }

    /// Makes every change durable in the filesystem's pending state, and
    /// in the next checkpoint of the log when the filesystem has one.
    pub fn commit(mut self) -> Result<()> {
        // Quotas: the changes of the inodes logged go into their owners'
        // dquots (held locked until published). A kind whose counts
        // cannot be kept exact has its "checked" mark cleared in the same
        // transaction (the kernel's next quota mount then recounts;
        // xfs_repair does not compare counts marked unchecked). Other
        // transactions wait until that is published, so none is durable
        // before it.
        let (dquots_held, inexact) = self.account_quotas()?;
        let quota_first = self.clear_quota_checked(inexact)?;
        let geo = self.geo();
        let journaled = self.ws.journaled();
        let mut c = Commit {
            freed: std::mem::take(&mut self.freed),
            allocated: std::mem::take(&mut self.allocated),
            unshared: std::mem::take(&mut self.unshared),
            icreates: std::mem::take(&mut self.icreates),
            done: std::mem::take(&mut self.done),
            ..Commit::default()
        };
        c.bufs.reserve(self.bufs.len());
        for b in std::mem::take(&mut self.bufs) {
            let len = b.len();
            if b.stale {
                c.stale.push((b.off, len));
                self.fs.invalidate_cached(Daddr(b.off >> 9), len as u32);
                continue;
            }
            if !b.dirty {
                continue;
            }
            let data: Arc<[u8]> = match b.data {
                Data::Owned(v) | Data::Shared(v) => v,
            };
            if b.dquot {
                // Each changed record is a dquot item; the block itself
                // is written back, not logged.
                if journaled {
                    dquot_items(&b.orig, &data, b.off, &mut c.dquots);
                }
                self.fs.invalidate_cached(Daddr(b.off >> 9), len as u32);
                c.bufs.push((
                    b.off,
                    Pending {
                        data,
                        crc_off: None,
                        lsn: None,
                    },
                    None,
                ));
                continue;
            }
            let log = if journaled {
                let kind = match b.kind {
                    Some(k) => k,
                    None => crate::log::cil::classify(b.off, &data)?,
                };
                let map = match &b.orig {
                    Some(o) if o.len() == data.len() => {
                        let mut m = DirtyMap::diff(o, &data);
                        // Directory blocks leave unused space out of the
                        // log (see live_chunks): a chunk that comes into
                        // use unchanged (zero) may never have been logged.
                        // A block of another kind has every chunk known.
                        if let Some(was) = crate::log::cil::live_chunks(o) {
                            let mut now = crate::log::cil::live_chunks(&data)
                                .unwrap_or_else(|| DirtyMap::full(data.len()));
                            now.minus(&was);
                            m.or(&now);
                        }
                        m
                    }
                    None => crate::log::cil::live_chunks(&data)
                        .unwrap_or_else(|| DirtyMap::full(data.len())),
                    _ => DirtyMap::full(data.len()),
                };
                (!map.is_empty()).then_some((map, kind))
            } else {
                None
            };
            self.fs.invalidate_cached(Daddr(b.off >> 9), len as u32);
            c.bufs.push((
                b.off,
                Pending {
                    data,
                    crc_off: b.crc_off,
                    lsn: None,
                },
                log,
            ));
        }
        for (ino, raw) in std::mem::take(&mut self.inodes) {
            // Inodes were encoded with their CRC.
            let logged = !self.covered.contains(&ino);
            if logged && self.unlinked.contains(&ino) {
                c.unlinked.push(geo.ino_to_bytes(Ino(ino)));
            }
            c.inodes
                .push((geo.ino_to_bytes(Ino(ino)), Ino(ino), raw, logged));
        }
        let next = self.ws.publish(c, &self.delta);
        if let Some((held, bits)) = quota_first {
            self.ws
                .quota
                .chkd
                .fetch_and(!bits, std::sync::atomic::Ordering::AcqRel);
            drop(held);
        }
        drop(dquots_held);
        self.release();
        match next {
            After::Writeback => self.fs.writeback_background()?,
            After::Force => self.fs.force_log()?,
            After::Nothing => {}
        }
        Ok(())
    }

    /// Applies the quota changes of the inodes this transaction logged
    /// to their dquots. Returns the dquot lock, held until the commit is
    /// published, and the "checked" bits of kinds it could not keep exact.
    #[allow(clippy::type_complexity)]
    fn account_quotas(&mut self) -> Result<(Option<std::sync::MutexGuard<'a, ()>>, u16)> {
        let ws = self.ws;
        let Some(acct) = ws.quota.acct.as_ref().filter(|a| a.exact()) else {
            return Ok((None, 0));
        };
        if self.qbefore.is_empty() {
            return Ok((None, 0));
        }
        use crate::quota::acct::{self as qa, Use};
        let before = std::mem::take(&mut self.qbefore);
        let (inodes, covered) = (&self.inodes, &self.covered);
        let (d, mut inexact) = qa::deltas(
            acct,
            &before,
            |ino| match inodes.get(&ino) {
                Some(raw) if !covered.contains(&ino) => Use::of_raw(acct, ino, raw),
                _ => Use::NONE,
            },
            &self.qrt,
        );
        if d.is_empty() {
            return Ok((None, inexact));
        }
        let held = acct.lock.lock().unwrap_or_else(|p| p.into_inner());
        let enforce = self.quota_limits && acct.enforce.load(std::sync::atomic::Ordering::Relaxed);
        let now = ws.now().0;
        inexact |= qa::apply(self, acct, &d, now, enforce)?;
        Ok((Some(held), inexact))
    }

    /// When this transaction changes something and quota "checked" bits
    /// are to be cleared (those of kinds never kept exact, and `inexact`):
    /// joins the superblock with them cleared, and returns the lock held
    /// until the commit is published, with the bits cleared.
    #[allow(clippy::type_complexity)]
    fn clear_quota_checked(
        &mut self,
        inexact: u16,
    ) -> Result<Option<(std::sync::MutexGuard<'a, ()>, u16)>> {
        use std::sync::atomic::Ordering;
        let ws = self.ws;
        let want = inexact
            | ws.quota
                .acct
                .as_ref()
                .map_or(xfs_format::sb::XFS_ALL_QUOTA_CHKD, |a| a.never_exact());
        if ws.quota.chkd.load(Ordering::Acquire) & want == 0
            || (self.inodes.is_empty() && !self.bufs.iter().any(|b| b.dirty || b.stale))
        {
            return Ok(None);
        }
        let held = ws.quota.lock.lock().unwrap_or_else(|p| p.into_inner());
        let bits = ws.quota.chkd.load(Ordering::Acquire) & want;
        if bits == 0 {
            return Ok(None);
        }
        let kind = crate::log::buftype::BufKind {
            blft: crate::log::buftype::blft::SB,
            lsn_off: Some(xfs_format::sb::XFS_SB_LSN_OFF),
        };
        let sect = self.geo().sect_size;
        let id = self.read_raw_buf(Daddr(0), sect, kind, Some(xfs_format::sb::XFS_SB_CRC_OFF))?;
        let b = self.buf_mut(id);
        let o = xfs_format::sb::XFS_SB_QFLAGS_OFF;
        let q = u16::from_be_bytes([b[o], b[o + 1]]) & !bits;
        b[o..o + 2].copy_from_slice(&q.to_be_bytes());
        Ok(Some((held, bits)))
    }

    /// Commits this transaction and starts the next one of a chain
    /// holding the same inode locks (the kernel's transaction roll): the
    /// inodes stay locked from one step of an operation to the next, AG
    /// locks are released.
    pub fn roll(mut self) -> Result<Trans<'a>> {
        let (fs, ws) = (self.fs, self.ws);
        let inodes = std::mem::take(&mut self.inode_locks);
        let limits = self.quota_limits;
        let r = self.commit();
        let mut next = Trans::new(fs, ws);
        next.quota_limits = limits;
        // Held by the new transaction from here: released at its end,
        // even when the commit failed.
        next.inode_locks = inodes;
        r.map(|()| next)
    }

    fn release(&mut self) {
        for a in self.ag_locks.drain(..) {
            self.ws.ags.unlock(u64::from(a));
        }
        for i in self.inode_locks.drain(..) {
            self.ws.inodes.unlock(i);
        }
    }
}

/// The dquot items of the records that differ between `orig` and `data`
/// (a block of dquot records at byte `off`).
fn dquot_items(
    orig: &Option<Arc<[u8]>>,
    data: &[u8],
    off: u64,
    out: &mut Vec<crate::log::cil::CilDquot>,
) {
    use xfs_format::quota::{XFS_DISK_DQUOT_SIZE, XFS_DQBLK_SIZE};
    for (i, rec) in data.chunks_exact(XFS_DQBLK_SIZE).enumerate() {
        let at = i * XFS_DQBLK_SIZE;
        if orig
            .as_ref()
            .is_some_and(|o| o.get(at..at + XFS_DQBLK_SIZE) == Some(rec))
        {
            continue;
        }
        let id = u32::from_be_bytes(rec[4..8].try_into().expect("4 bytes"));
        out.push(crate::log::cil::CilDquot {
            id,
            buf_off: off,
            buf_len: data.len() as u32,
            boffset: at as u32,
            rec: rec[..XFS_DISK_DQUOT_SIZE].try_into().expect("104 bytes"),
        });
    }
}

impl TBuf {
    fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Shared(a) => a,
            Data::Owned(v) => v,
        }
    }

    fn len(&self) -> usize {
        self.bytes().len()
    }
}

impl Drop for Trans<'_> {
    fn drop(&mut self) {
        self.release();
    }
}
