//! Writing a metadump (`xfskit metadump`): every metadata block of the data
//! device, found by walking the filesystem as xfs_metadump walks it, copied
//! into a v2 (or v1) file. Copied: each AG's superblock, AGF, AGI and AGFL
//! sectors; the blocks of the free space, inode, free inode, reverse
//! mapping and reference count btrees; the inode clusters of every inode
//! chunk (sparse holes left out); for every inode in use its bmbt blocks,
//! its attribute fork's blocks, and the data fork's blocks of directories,
//! symbolic links and metadata files (realtime bitmap and summary, quota
//! files, metadata directory files); the internal log. File data and the
//! realtime device are not copied.

use super::format::*;
use super::obfuscate::Obfuscator;
use super::zero::{Ctx, Kind};
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, FsBlock, Ino};
use crate::inode::bmap::{for_each_extent, Fork};
use crate::inode::{FileType, ForkFormat, Inode};
use crate::log::LogState;
use crate::Fs;
use std::io::Write;

/// How a metadump is written.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// The file format: 1 or 2.
    pub version: u32,
    /// Copy whole metadata blocks (xfs_metadump -a): the stale bytes are
    /// kept. Without it they are zeroed, as xfs_metadump zeroes them.
    pub full_blocks: bool,
    /// Obfuscate names, symbolic link targets and attribute names and
    /// values (xfs_metadump's default; -o turns it off).
    pub obfuscate: bool,
    /// The obfuscation's seed: the same seed, the same dump. None: a
    /// fresh one each time.
    pub seed: Option<u64>,
}

/// What a dump wrote.
#[derive(Debug, Clone, Default)]
pub struct DumpReport {
    /// Bytes of metadata copied.
    pub bytes: u64,
    /// Extent records (v2) or data blocks (v1) written.
    pub records: u64,
    /// The log was dirty.
    pub dirty_log: bool,
    /// Problems met and gone past (the damaged structure left uncopied).
    pub warnings: Vec<String>,
    /// An obfuscated dump's dirty log, copied as it is (xfs_metadump
    /// always warns of it).
    pub log_warning: Option<String>,
}

/// One range of data-device sectors to copy, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Item {
    daddr: u64,
    sectors: u64,
    kind: Kind,
}

/// The data-device sectors to copy, sorted at the end.
#[derive(Default)]
struct Plan {
    items: Vec<Item>,
    /// Directory blocks whose fs blocks are not contiguous: their pieces.
    gathered: Vec<(Vec<(u64, u64)>, Kind)>,
}

impl Plan {
    fn add(&mut self, daddr: u64, sectors: u64, kind: Kind) {
        if sectors > 0 {
            self.items.push(Item {
                daddr,
                sectors,
                kind,
            });
        }
    }
}

struct Walker<'a> {
    fs: &'a Fs,
    plan: Plan,
    warnings: Vec<String>,
    quota_inos: Vec<u64>,
}

const NULLAGBLOCK: u32 = u32::MAX;

impl Walker<'_> {
    fn warn(&mut self, s: String) {
        self.warnings.push(s);
    }

    fn read(&self, daddr: u64, len: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        self.fs.read_bytes(daddr * 512, &mut b)?;
        Ok(b)
    }

    fn agb(&self, agno: u32, agbno: u32) -> u64 {
        self.fs
            .geometry()
            .agb_to_daddr(AgNumber(agno), AgBlock(agbno))
            .0
    }

    fn fsb_daddr(&self, fsb: u64) -> Option<u64> {
        let geo = self.fs.geometry();
        let (ag, b) = geo.fsb_split(FsBlock(fsb));
        if ag.0 >= geo.ag_count || b.0 >= geo.ag_len(ag) {
            return None;
        }
        Some(geo.agb_to_daddr(ag, b).0)
    }

    /// A short-pointer AG btree: every block, from the root. `keylen` is a
    /// node's key size (both keys of an overlapping btree's entry).
    #[allow(clippy::too_many_arguments)]
    fn short_btree(
        &mut self,
        agno: u32,
        what: &str,
        root: u32,
        levels: u32,
        keylen: usize,
        kind: Kind,
    ) {
        let geo = self.fs.geometry();
        let bs = geo.block_size as usize;
        let hdr = geo.layout().sblock_hdr;
        let ag_len = geo.ag_len(AgNumber(agno));
        if levels == 0 || levels > 9 || root == 0 || root >= ag_len {
            self.warn(format!(
                "AG {agno} {what}: root {root} with {levels} levels is invalid; not copied"
            ));
            return;
        }
        let mut level_blocks = vec![root];
        for level in (0..levels).rev() {
            let mut next = Vec::new();
            for &agbno in &level_blocks {
                if agbno == 0 || agbno >= ag_len {
                    self.warn(format!("AG {agno} {what}: pointer {agbno} outside the AG"));
                    continue;
                }
                let d = self.agb(agno, agbno);
                self.plan.add(d, (bs / 512) as u64, kind);
                if level == 0 {
                    continue;
                }
                let b = match self.read(d, bs) {
                    Ok(b) => b,
                    Err(e) => {
                        self.warn(format!("AG {agno} {what} block {agbno}: {e}"));
                        continue;
                    }
                };
                let n = usize::from(u16::from_be_bytes([b[6], b[7]]));
                let maxrecs = (bs - hdr) / (keylen + 4);
                if n > maxrecs {
                    self.warn(format!(
                        "AG {agno} {what} block {agbno}: {n} records, at most {maxrecs}"
                    ));
                    continue;
                }
                let p = hdr + maxrecs * keylen;
                for i in 0..n {
                    let o = p + i * 4;
                    next.push(u32::from_be_bytes(b[o..o + 4].try_into().unwrap()));
                }
            }
            if next.len() > ag_len as usize {
                self.warn(format!("AG {agno} {what}: more blocks than the AG has"));
                return;
            }
            level_blocks = next;
        }
    }

    fn ag(&mut self, agno: u32) -> Result<()> {
        let geo = self.fs.geometry();
        let ss = u64::from(geo.sect_size / 512);
        let base = self.agb(agno, 0);
        // Superblock, AGF, AGI, AGFL: one sector each.
        self.plan.add(base, ss, Kind::Sb);
        self.plan.add(base + ss, 2 * ss, Kind::Raw);
        let agf = self.read(base + ss, geo.sect_size as usize)?;
        let agi = self.read(base + 2 * ss, geo.sect_size as usize)?;
        // AGF: agf_flfirst 40, agf_fllast 44.
        self.plan.add(
            base + 3 * ss,
            ss,
            Kind::Agfl {
                first: be32(&agf, 40),
                last: be32(&agf, 44),
            },
        );
        let (rmap, reflink, finobt) = (
            geo.features.rmapbt,
            geo.features.reflink,
            geo.features.finobt,
        );
        // AGF: bno root 16, cnt root 20, rmap root 24, bno level 28, cnt level 32,
        // rmap level 36; refcount root 88, level 92.
        self.short_btree(
            agno,
            "free space (block) btree",
            be32(&agf, 16),
            be32(&agf, 28),
            8,
            Kind::AllocBt,
        );
        self.short_btree(
            agno,
            "free space (count) btree",
            be32(&agf, 20),
            be32(&agf, 32),
            8,
            Kind::AllocBt,
        );
        if rmap {
            self.short_btree(
                agno,
                "reverse mapping btree",
                be32(&agf, 24),
                be32(&agf, 36),
                40,
                Kind::Raw,
            );
        }
        if reflink {
            self.short_btree(
                agno,
                "reference count btree",
                be32(&agf, 88),
                be32(&agf, 92),
                4,
                Kind::Raw,
            );
        }
        // AGI: root 20, level 24; free inode btree root 328, level 332.
        self.short_btree(
            agno,
            "inode btree",
            be32(&agi, 20),
            be32(&agi, 24),
            4,
            Kind::InoBt,
        );
        if finobt {
            self.short_btree(
                agno,
                "free inode btree",
                be32(&agi, 328),
                be32(&agi, 332),
                4,
                Kind::InoBt,
            );
        }
        let _ = NULLAGBLOCK;
        // Inode chunks and what their inodes own.
        let mut chunks = Vec::new();
        if let Err(e) = crate::scan::inobt::walk(self.fs, agno, 0, |r| {
            chunks.push(*r);
            Ok(true)
        }) {
            self.warn(format!(
                "AG {agno} inode btree: {e}; inodes past it not copied"
            ));
        }
        for c in chunks {
            self.chunk(agno, &c);
        }
        Ok(())
    }

    fn chunk(&mut self, agno: u32, c: &crate::scan::inobt::ChunkRec) {
        let geo = self.fs.geometry();
        let isz = geo.inode_size as usize;
        let per_cluster = (geo.inode_cluster_size as usize / isz).max(1);
        let holes = c.hole_inodes();
        let alloc = c.allocated();
        let chunk_inodes = 64usize;
        let mut first = 0;
        while first < chunk_inodes {
            let n = per_cluster.min(chunk_inodes - first);
            let mask = if n >= 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << first
            };
            let agino = c.startino + first as u32;
            first += n;
            if holes & mask == mask {
                continue;
            }
            let agbno = agino >> geo.inopb_log;
            let within = (agino & ((1 << geo.inopb_log) - 1)) as u64 * isz as u64;
            let d0 = self.agb(agno, agbno);
            let daddr = d0 + within / 512;
            let bytes = n * isz;
            let first_ino =
                (u64::from(agno) << (geo.ag_blk_log + geo.inopb_log)) | u64::from(agino);
            let off = agino - c.startino;
            self.plan.add(
                daddr,
                bytes.div_ceil(512) as u64,
                Kind::Inodes {
                    ino: first_ino,
                    free: c.free >> off,
                },
            );
            if alloc & mask == 0 {
                continue;
            }
            let buf = match self.read(daddr, bytes) {
                Ok(b) => b,
                Err(e) => {
                    self.warn(format!("AG {agno} inode cluster at agino {agino}: {e}"));
                    continue;
                }
            };
            for i in 0..n {
                let bit = (agino - c.startino) as usize + i;
                if alloc & (1 << bit) == 0 {
                    continue;
                }
                let ino = (u64::from(agno) << (geo.ag_blk_log + geo.inopb_log))
                    | u64::from(agino + i as u32);
                let raw = &buf[i * isz..(i + 1) * isz];
                match Inode::decode(geo, Ino(ino), raw) {
                    Ok(inode) => self.inode(&inode),
                    Err(e) => self.warn(format!("inode {ino}: {e}; its blocks not copied")),
                }
            }
        }
    }

    fn bmbt(&mut self, ino: u64, fork: &[u8]) {
        let geo = self.fs.geometry();
        let bs = geo.block_size as usize;
        let hdr = geo.layout().lblock_hdr;
        if fork.len() < 4 {
            return;
        }
        let level = u16::from_be_bytes([fork[0], fork[1]]);
        let n = usize::from(u16::from_be_bytes([fork[2], fork[3]]));
        let maxrecs = (fork.len() - 4) / 16;
        if level == 0 || level > 9 || n > maxrecs {
            self.warn(format!("inode {ino}: bmbt root level {level}, {n} records"));
            return;
        }
        let p = 4 + maxrecs * 8;
        let mut cur: Vec<u64> = (0..n)
            .map(|i| u64::from_be_bytes(fork[p + i * 8..p + i * 8 + 8].try_into().unwrap()))
            .collect();
        for lvl in (0..level).rev() {
            let mut next = Vec::new();
            for &fsb in &cur {
                let Some(d) = self.fsb_daddr(fsb) else {
                    self.warn(format!(
                        "inode {ino}: bmbt pointer {fsb} outside the filesystem"
                    ));
                    continue;
                };
                self.plan.add(d, (bs / 512) as u64, Kind::Bmbt);
                if lvl == 0 {
                    continue;
                }
                let Ok(b) = self.read(d, bs) else { continue };
                let n = usize::from(u16::from_be_bytes([b[6], b[7]]));
                let maxrecs = (bs - hdr) / 16;
                if n > maxrecs {
                    continue;
                }
                let p = hdr + maxrecs * 8;
                next.extend(
                    (0..n).map(|i| {
                        u64::from_be_bytes(b[p + i * 8..p + i * 8 + 8].try_into().unwrap())
                    }),
                );
            }
            if next.len() as u64 > geo.data_blocks {
                return;
            }
            cur = next;
        }
    }

    fn fork_blocks(&mut self, inode: &Inode, fork: Fork) {
        let mut runs = Vec::new();
        let r = for_each_extent(self.fs, inode, fork, &mut |e| {
            runs.push((e.offset, e.start.0, e.len));
            Ok(())
        });
        if let Err(e) = r {
            self.warn(format!("inode {} {} fork: {e}", inode.ino.0, fork.name()));
        }
        let geo = self.fs.geometry();
        let spb = u64::from(geo.block_size / 512);
        let ino = inode.ino.0;
        let meta =
            geo.features.metadir && inode.flags2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0;
        let dir = fork == Fork::Data && inode.file_type == FileType::Dir;
        let fsbcount = u64::from((geo.dir_blk_size / geo.block_size).max(1));
        let block_form = runs.last().is_some_and(|&(o, _, l)| o + l == fsbcount);
        // A directory block spread over several extents, gathered.
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        let mut have = 0u64;
        for (off, start, len) in runs {
            // An extent never crosses an AG; copy it block run by block run.
            let Some(d) = self.fsb_daddr(start) else {
                continue;
            };
            if fork == Fork::Attr {
                for i in 0..len {
                    let kind = Kind::Attr {
                        ino,
                        off: off + i,
                        meta,
                    };
                    self.plan.add(d + i * spb, spb, kind);
                }
            } else if dir && fsbcount == 1 {
                for i in 0..len {
                    let kind = Kind::Dir {
                        ino,
                        off: off + i,
                        block_form,
                        single: true,
                        meta,
                    };
                    self.plan.add(d + i * spb, spb, kind);
                }
            } else if dir {
                let kind = Kind::Dir {
                    ino,
                    off,
                    block_form,
                    single: false,
                    meta,
                };
                let mut left = len;
                let mut at = d;
                while left > 0 {
                    let n = left.min(fsbcount - have);
                    pieces.push((at, n * spb));
                    have += n;
                    left -= n;
                    at += n * spb;
                    if have == fsbcount {
                        if pieces.len() == 1 {
                            self.plan.add(pieces[0].0, pieces[0].1, kind);
                        } else {
                            self.plan.gathered.push((std::mem::take(&mut pieces), kind));
                        }
                        pieces.clear();
                        have = 0;
                    }
                }
            } else if inode.file_type == FileType::Symlink {
                self.plan.add(d, len * spb, Kind::Symlink { meta });
            } else {
                self.plan.add(d, len * spb, Kind::Raw);
            }
        }
    }

    fn inode(&mut self, inode: &Inode) {
        if inode.mode == 0 {
            return;
        }
        let geo = self.fs.geometry();
        let ino = inode.ino.0;
        let metafile = inode.flags2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0
            || ino == geo.rbm_ino.0
            || ino == geo.rsum_ino.0
            || self.quota_inos.contains(&ino);
        let copy_data = matches!(inode.file_type, FileType::Dir | FileType::Symlink) || metafile;
        match inode.format {
            ForkFormat::Btree => {
                self.bmbt(ino, &inode.data_fork);
                if copy_data && !inode.is_realtime() {
                    self.fork_blocks(inode, Fork::Data);
                }
            }
            ForkFormat::Extents if copy_data && !inode.is_realtime() => {
                self.fork_blocks(inode, Fork::Data)
            }
            _ => {}
        }
        if inode.forkoff != 0 {
            match inode.aformat {
                ForkFormat::Btree => {
                    self.bmbt(ino, &inode.attr_fork);
                    self.fork_blocks(inode, Fork::Attr);
                }
                ForkFormat::Extents => self.fork_blocks(inode, Fork::Attr),
                _ => {}
            }
        }
    }
}

/// Where dumped sectors go: v2 extent records or v1 index blocks.
struct Emitter<'a> {
    out: &'a mut dyn Write,
    version: u32,
    /// v1: the mb_info byte, the index being filled and its sectors.
    info: u8,
    index: Vec<u64>,
    data: Vec<u8>,
    records: u64,
    bytes: u64,
}

/// Sectors per v2 record (8 MiB).
const MAXREC: u64 = 1 << 14;

impl Emitter<'_> {
    fn emit(&mut self, daddr: u64, b: &[u8]) -> Result<()> {
        let n = (b.len() / 512) as u64;
        if self.version == 2 {
            let mut off = 0;
            while off < n {
                let k = (n - off).min(MAXREC);
                self.out.write_all(&(daddr + off).to_be_bytes())?;
                self.out.write_all(&(k as u32).to_be_bytes())?;
                self.out
                    .write_all(&b[(off * 512) as usize..((off + k) * 512) as usize])?;
                self.records += 1;
                self.bytes += k * 512;
                off += k;
            }
            return Ok(());
        }
        for i in 0..n {
            self.index.push(daddr + i);
            self.data
                .extend_from_slice(&b[(i * 512) as usize..((i + 1) * 512) as usize]);
            self.records += 1;
            self.bytes += 512;
            if self.index.len() == MD1_MAX_INDICES {
                self.flush_v1()?;
            }
        }
        Ok(())
    }

    fn flush_v1(&mut self) -> Result<()> {
        let mut blk = vec![0u8; MD1_BLOCK];
        blk[..4].copy_from_slice(&MD1_MAGIC.to_be_bytes());
        blk[4..6].copy_from_slice(&(self.index.len() as u16).to_be_bytes());
        blk[6] = 9;
        blk[7] = self.info;
        for (i, d) in self.index.iter().enumerate() {
            blk[8 + i * 8..16 + i * 8].copy_from_slice(&d.to_be_bytes());
        }
        self.out.write_all(&blk)?;
        self.out.write_all(&self.data)?;
        self.index.clear();
        self.data.clear();
        Ok(())
    }
}

/// The seed of a dump's obfuscation when none is given: fresh each run.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// The inode of /lost+found, when the root directory has one.
fn orphanage(fs: &Fs) -> Option<u64> {
    fs.lookup_path(b"/lost+found").ok().map(|i| i.ino.0)
}

/// Writes a metadump of `fs` (opened without log recovery) to `out`.
pub fn dump(
    fs: &Fs,
    out: &mut dyn Write,
    opts: &DumpOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<DumpReport> {
    let geo = fs.geometry();
    if opts.version != 1 && opts.version != 2 {
        return Err(Error::Invalid(format!(
            "metadump format version {} (1 or 2)",
            opts.version
        )));
    }
    if geo.log_start.0 == 0 {
        return Err(Error::Unsupported(
            "an external log is not dumped yet: xfs_metadump -l LOGDEV does".into(),
        ));
    }
    if geo.features.metadir && geo.rg_count > 0 {
        return Err(Error::Unsupported(
            "realtime groups are not dumped yet (their superblocks on the realtime device \
             and their rmap and refcount btree blocks): use xfs_metadump -r RTDEV"
                .into(),
        ));
    }
    let dirty = matches!(fs.log_state(), LogState::Dirty(_));
    let mut sb0 = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(0, &mut sb0)?;
    let q = |o: usize| u64::from_be_bytes(sb0[o..o + 8].try_into().unwrap());
    let mut w = Walker {
        fs,
        plan: Plan::default(),
        warnings: Vec::new(),
        // sb_uquotino 160, sb_gquotino 168, sb_pquotino 232.
        quota_inos: [q(160), q(168), if geo.v5 { q(232) } else { 0 }]
            .into_iter()
            .filter(|&i| i != 0 && i != u64::MAX)
            .collect(),
    };
    for agno in 0..geo.ag_count {
        progress(&format!("Copying AG {agno} of {}", geo.ag_count));
        if let Err(e) = w.ag(agno) {
            w.warn(format!("AG {agno}: {e}"));
        }
    }
    let mut rep = DumpReport {
        dirty_log: dirty,
        warnings: std::mem::take(&mut w.warnings),
        ..Default::default()
    };
    let mut plan = std::mem::take(&mut w.plan);
    let transform = !opts.full_blocks || opts.obfuscate;
    let mut ctx = Ctx {
        geo,
        zero: !opts.full_blocks,
        obf: opts
            .obfuscate
            .then(|| Obfuscator::new(opts.seed.unwrap_or_else(random_seed))),
        root: geo.root_ino.0,
        orphanage: if opts.obfuscate { orphanage(fs) } else { None },
        parent: geo.features_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT != 0,
        ascii_ci: geo.versionnum & xfs_format::sb::XFS_SB_VERSION_BORGBIT != 0,
    };

    let dev_sectors = geo.data_blocks * u64::from(geo.block_size / 512);
    plan.items.retain_mut(|it| {
        if it.daddr + it.sectors > dev_sectors {
            it.sectors = dev_sectors.saturating_sub(it.daddr);
            it.kind = Kind::Raw;
        }
        it.sectors > 0
    });
    plan.items.sort_unstable();
    plan.items.dedup();
    let read = |d: u64, n: u64| -> Result<Vec<u8>> {
        let mut b = vec![0u8; (n * 512) as usize];
        fs.read_bytes(d * 512, &mut b)
            .map_err(|e| Error::corrupt("metadata", Location::Daddr(d), e.to_string()))?;
        Ok(b)
    };

    let mut info = MD1_INFO_FLAGS;
    let mut compat = 0;
    if opts.obfuscate {
        info |= MD1_OBFUSCATED;
        compat |= MD2_COMPAT_OBFUSCATED;
    }
    if opts.full_blocks {
        info |= MD1_FULLBLOCKS;
        compat |= MD2_COMPAT_FULLBLOCKS;
    }
    if dirty {
        info |= MD1_DIRTYLOG;
        compat |= MD2_COMPAT_DIRTYLOG;
    }
    if opts.version == 2 {
        let mut h = Vec::with_capacity(MD2_HDR);
        h.extend(MD2_MAGIC.to_be_bytes());
        h.extend(2u32.to_be_bytes());
        h.extend(compat.to_be_bytes());
        h.extend(0u32.to_be_bytes());
        h.extend(0u64.to_be_bytes());
        out.write_all(&h)?;
    }
    let mut em = Emitter {
        out,
        version: opts.version,
        info,
        index: Vec::with_capacity(MD1_MAX_INDICES),
        data: Vec::with_capacity(MD1_MAX_INDICES * 512),
        records: 0,
        bytes: 0,
    };
    // Runs of touching or overlapping items, read at once; sector 0 (the
    // primary superblock) first.
    let items = &plan.items;
    let mut i = 0;
    while i < items.len() {
        let start = items[i].daddr;
        let mut end = start + items[i].sectors;
        let mut j = i + 1;
        while j < items.len()
            && (items[j].daddr < end
                || (items[j].daddr == end && end + items[j].sectors - start <= MAXREC))
        {
            end = end.max(items[j].daddr + items[j].sectors);
            j += 1;
        }
        let mut b = read(start, end - start)?;
        if transform {
            for it in &items[i..j] {
                let o = ((it.daddr - start) * 512) as usize;
                ctx.apply(it.kind, &mut b[o..o + (it.sectors * 512) as usize]);
            }
        }
        // xfs_mdrestore reads the first record as the superblock alone (a
        // longer one is refused): it gets a record of its own.
        let ss = (geo.sect_size as usize).min(b.len());
        if start == 0 && i == 0 {
            em.emit(0, &b[..ss])?;
            em.emit((ss / 512) as u64, &b[ss..])?;
        } else {
            em.emit(start, &b)?;
        }
        i = j;
    }
    for (pieces, kind) in &plan.gathered {
        let mut b = Vec::new();
        for &(d, n) in pieces {
            if d + n > dev_sectors {
                continue;
            }
            b.extend(read(d, n)?);
        }
        if b.len() as u64 != pieces.iter().map(|p| p.1 * 512).sum::<u64>() {
            continue;
        }
        if transform {
            ctx.apply(*kind, &mut b);
        }
        let mut o = 0;
        for &(d, n) in pieces {
            let len = (n * 512) as usize;
            em.emit(d, &b[o..o + len])?;
            o += len;
        }
    }

    progress("Copying log");
    let log_d = geo.fsb_to_daddr(geo.log_start).0;
    let log_n = (u64::from(geo.log_blocks) * u64::from(geo.block_size / 512))
        .min(dev_sectors.saturating_sub(log_d));
    // Without -a, or when obfuscating, a clean log is rewritten cleared as
    // xfs_metadump rewrites it; a dirty one is copied as it is.
    let cleared = if transform && matches!(fs.log_state(), LogState::Clean) {
        let log = crate::log::log_dev(fs.device(), geo)?;
        crate::log::find::find_ends(&log)
            .ok()
            .filter(|e| e.clean && !e.empty)
            .map(|e| {
                let cycle = if geo.v5 {
                    e.head_cycle.saturating_add(1)
                } else {
                    1
                };
                crate::log::clear::Cleared::new(geo, log_n, cycle)
            })
    } else {
        None
    };
    if dirty && opts.obfuscate {
        rep.log_warning = Some(
            "the log is dirty and copied as it is: its changes are not obfuscated, and \
             replaying them into the obfuscated image can leak names or damage it (mount the \
             filesystem to clean the log, or give -o)"
                .into(),
        );
    }
    let mut off = 0;
    while off < log_n {
        let n = (log_n - off).min(MAXREC);
        let b = match &cleared {
            Some(c) => {
                let mut b = vec![0u8; (n * 512) as usize];
                c.fill(off, &mut b);
                b
            }
            None => read(log_d + off, n)?,
        };
        em.emit(log_d + off, &b)?;
        off += n;
    }
    if opts.version == 1 {
        // The last index block is never full: an empty one ends a file
        // whose blocks filled the previous one exactly.
        em.flush_v1()?;
    }
    rep.records = em.records;
    rep.bytes = em.bytes;
    if let Some(o) = &ctx.obf {
        if o.duplicates > 0 {
            rep.warnings.push(format!(
                "{} names found no obfuscated name of their own and were kept",
                o.duplicates
            ));
        }
    }
    em.out.flush()?;
    Ok(rep)
}
