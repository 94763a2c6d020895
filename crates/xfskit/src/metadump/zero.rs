//! What a metadump does to the blocks it copies when it does not copy them
//! whole (xfs_metadump's default, without -a) and when it obfuscates
//! (without -o): the bytes no structure uses are zeroed, and names,
//! symbolic link targets and attribute values are replaced.
//!
//! The rules are xfs_metadump 7.2's (its db/metadump.c, read for the
//! facts; compared with its dumps restored, byte for byte, in the CLI's
//! tests/metadump.rs):
//!
//! - btree blocks of the free space, inode and free inode btrees and of
//!   bmbts: past the last record (leaves); between the last key and the
//!   pointers and past the last pointer (nodes). Reverse mapping and
//!   reference count btree blocks are copied as they are;
//! - free inodes: the whole literal area. Inodes in use: short-form
//!   directories, symbolic links and attribute forks past their size;
//!   extent lists past their last extent; a bmbt root's unused keys and
//!   pointers; a device inode past its device number;
//! - the AGFL's slots outside the list;
//! - directory data blocks: the free regions (between their length and
//!   tag) and each entry's padding after its file type byte; leaf blocks
//!   between the entries and the best-free table (single leaf) or past the
//!   entries (node leaves); free index blocks past the last entry; node
//!   blocks past their entries;
//! - attribute leaves: between the entry table and the first name, and
//!   each name's padding; attribute node blocks past their entries;
//! - remote symbolic link blocks past the target;
//! - a clean log is rewritten as `xfs_repair -L` writes a cleared one (a
//!   dirty one is copied as it is).
//!
//! A block whose CRC was right gets a new CRC; one whose CRC was wrong
//! keeps it (the damage stays visible in the dump).

use super::obfuscate::{hashname, Obfuscator, SCOPE_ATTR};
use crate::bytes::{be16, be32, be64};
use crate::geometry::Geometry;
use xfs_format::attr::{XFS_ATTR_LOCAL, XFS_ATTR_PARENT};
use xfs_format::crc;
use xfs_format::inode::{XFS_DIFLAG2_METADATA, XFS_DIFLAG2_NREXT64};
use xfs_format::types::{
    S_IFDIR, S_IFLNK, S_IFMT, S_IFREG, XFS_DINODE_FMT_BTREE, XFS_DINODE_FMT_EXTENTS,
    XFS_DINODE_FMT_LOCAL,
};

/// What a block copied into a metadump is, for what is done to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Copied as it is.
    Raw,
    /// An AG's superblock sector.
    Sb,
    /// An AGFL sector and its AGF's list ends.
    Agfl { first: u32, last: u32 },
    /// A free space btree block.
    AllocBt,
    /// An inode or free inode btree block.
    InoBt,
    /// A bmbt block.
    Bmbt,
    /// Inodes: the first's number and which are free (bit 0 the first).
    Inodes { ino: u64, free: u64 },
    /// A directory block at file block `off` of directory `ino`;
    /// `block_form`: the directory's last mapped block ends where one
    /// directory block does; `single`: a directory block is one fs block.
    Dir {
        ino: u64,
        off: u64,
        block_form: bool,
        single: bool,
        meta: bool,
    },
    /// An attribute fork block at file block `off` of inode `ino`.
    Attr { ino: u64, off: u64, meta: bool },
    /// The blocks of one extent of a symbolic link.
    Symlink { meta: bool },
}

/// How the copied blocks are changed.
pub struct Ctx<'a> {
    pub geo: &'a Geometry,
    /// Zero the bytes no structure uses (not -a).
    pub zero: bool,
    /// Obfuscate names (not -o).
    pub obf: Option<Obfuscator>,
    /// The root directory.
    pub root: u64,
    /// The lost+found directory, if the root has one.
    pub orphanage: Option<u64>,
    /// The filesystem has parent pointers.
    pub parent: bool,
    /// Directory names hash case-insensitively: their hash cannot be kept
    /// by this obfuscation, so they are left as they are.
    pub ascii_ci: bool,
}

/// Zeroes `b[from..to]`, clipped to `b`.
fn zero(b: &mut [u8], from: usize, to: usize) {
    let to = to.min(b.len());
    if from < to {
        b[from..to].fill(0);
    }
}

/// Length of the NUL-terminated string at the start of `b` (all of `b`
/// when it holds no NUL).
fn strlen(b: &[u8]) -> usize {
    b.iter().position(|&c| c == 0).unwrap_or(b.len())
}

impl Ctx<'_> {
    fn obfuscating(&self) -> bool {
        self.obf.is_some()
    }

    /// Applies what is done to a block of kind `kind` (its bytes `b`).
    pub fn apply(&mut self, kind: Kind, b: &mut [u8]) {
        match kind {
            Kind::Raw => {}
            Kind::Sb => self.sb(b),
            Kind::Agfl { first, last } => self.agfl(b, first, last),
            Kind::AllocBt => self.btree(b, 8, 4, 8),
            Kind::InoBt => self.btree(b, 4, 4, 16),
            Kind::Bmbt => self.btree(b, 8, 8, 16),
            Kind::Inodes { ino, free } => {
                let isz = self.geo.inode_size as usize;
                for (i, d) in b.chunks_exact_mut(isz).enumerate() {
                    self.inode(ino + i as u64, d, free & (1 << i.min(63)) != 0);
                }
            }
            Kind::Dir {
                ino,
                off,
                block_form,
                single,
                meta,
            } => self.dir_block(b, ino, off, block_form, single, meta),
            Kind::Attr { ino, off, meta } => self.attr_block(b, ino, off, meta),
            Kind::Symlink { meta } => self.symlink_block(b, meta),
        }
    }

    fn sb(&mut self, b: &mut [u8]) {
        if !self.obfuscating() || b.len() < 240 {
            return;
        }
        let ok = self.geo.v5 && crc::verify(b, 224);
        let n = strlen(&b[108..120]);
        b[108..108 + n].fill(b'L');
        if ok {
            crc::stamp(b, 224);
        }
    }

    fn agfl(&mut self, b: &mut [u8], first: u32, last: u32) {
        if !self.zero {
            return;
        }
        let (base, crc_off) = if self.geo.v5 {
            (36, Some(32))
        } else {
            (0, None)
        };
        let size = (b.len().saturating_sub(base) / 4) as u32;
        if first >= size || last >= size {
            return;
        }
        let ok = crc_off.is_some_and(|o| crc::verify(b, o));
        let mut i = last;
        loop {
            i += 1;
            if i == size {
                i = 0;
            }
            if i == first {
                break;
            }
            let o = base + i as usize * 4;
            b[o..o + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        }
        if let (true, Some(o)) = (ok, crc_off) {
            crc::stamp(b, o);
        }
    }

    /// A btree block: `keylen`/`ptrlen` of nodes, `reclen` of leaves.
    fn btree(&mut self, b: &mut [u8], keylen: usize, ptrlen: usize, reclen: usize) {
        if !self.zero || b.len() < 8 {
            return;
        }
        let long = ptrlen == 8;
        let hdr = match (self.geo.v5, long) {
            (true, true) => 72,
            (true, false) => 56,
            (false, true) => 24,
            (false, false) => 16,
        };
        let crc_off = if long { 64 } else { 52 };
        let bs = b.len();
        if bs <= hdr {
            return;
        }
        let ok = self.geo.v5 && crc::verify(b, crc_off);
        let level = be16(b, 4);
        let n = usize::from(be16(b, 6));
        if level > 0 {
            let maxr = (bs - hdr) / (keylen + ptrlen);
            if n > maxr {
                return;
            }
            zero(b, hdr + n * keylen, hdr + maxr * keylen);
            zero(b, hdr + maxr * keylen + n * ptrlen, bs);
        } else {
            let maxr = (bs - hdr) / reclen;
            if n > maxr {
                return;
            }
            zero(b, hdr + n * reclen, bs);
        }
        if ok {
            crc::stamp(b, crc_off);
        }
    }

    // ---- inodes ----

    fn inode(&mut self, ino: u64, d: &mut [u8], free: bool) {
        let geo = self.geo;
        if d.len() < 100 {
            return;
        }
        let version = d[4];
        let ok = geo.v5 && crc::verify(d, 100);
        let core = if version >= 3 { 176 } else { 100 };
        if d.len() <= core {
            return;
        }
        let litino = d.len() - core;
        let mut new_crc = false;
        if free {
            if self.zero {
                d[core..].fill(0);
            }
        } else {
            let mode = be16(d, 2);
            let format = d[5];
            let forkoff = usize::from(d[82]);
            let dsize = if forkoff != 0 { forkoff * 8 } else { litino };
            let flags2 = if version >= 3 { be64(d, 120) } else { 0 };
            let meta = geo.features.metadir && version >= 3 && flags2 & XFS_DIFLAG2_METADATA != 0;
            let nrext64 = version >= 3 && flags2 & XFS_DIFLAG2_NREXT64 != 0;
            let (dnext, anext) = if nrext64 {
                (be64(d, 24), u64::from(be32(d, 76)))
            } else {
                (u64::from(be32(d, 76)), u64::from(be16(d, 80)))
            };
            match mode & S_IFMT {
                S_IFDIR | S_IFLNK | S_IFREG => {
                    match format {
                        XFS_DINODE_FMT_LOCAL
                            if (self.zero || self.obfuscating()) && dsize <= litino =>
                        {
                            let (c, rest) = d.split_at_mut(core);
                            let size = be64(c, 56);
                            let fork = &mut rest[..dsize];
                            if mode & S_IFMT == S_IFDIR {
                                self.sf_dir(ino, fork, size, meta);
                            } else if mode & S_IFMT == S_IFLNK {
                                self.sf_symlink(fork, size);
                            }
                        }
                        XFS_DINODE_FMT_EXTENTS => {
                            let max = if nrext64 {
                                (1 << 48) - 1
                            } else {
                                (1 << 31) - 1
                            };
                            self.ex_fork(&mut d[core..core + dsize.min(litino)], dnext, max);
                        }
                        XFS_DINODE_FMT_BTREE => {
                            self.bt_fork(&mut d[core..core + dsize.min(litino)])
                        }
                        _ => {}
                    }
                    if format == XFS_DINODE_FMT_LOCAL {
                        new_crc = true;
                    }
                }
                0o010000 | 0o020000 | 0o060000 | 0o140000 => {
                    new_crc = true;
                    if dnext == 0 && dsize <= litino && self.zero {
                        zero(d, core + 4, core + dsize);
                    }
                }
                _ => {}
            }
            if dsize < litino {
                let (c, rest) = d.split_at_mut(core);
                let afork = &mut rest[dsize..];
                match c[83] {
                    XFS_DINODE_FMT_LOCAL => {
                        new_crc = true;
                        if self.zero || self.obfuscating() {
                            self.sf_attr(ino, afork, meta);
                        }
                    }
                    XFS_DINODE_FMT_EXTENTS => {
                        let max = if nrext64 {
                            u64::from(u32::MAX)
                        } else {
                            (1 << 15) - 1
                        };
                        self.ex_fork(afork, anext, max);
                    }
                    XFS_DINODE_FMT_BTREE => self.bt_fork(afork),
                    _ => {}
                }
            }
        }
        if self.zero {
            new_crc = true;
        }
        if ok && new_crc && version >= 3 {
            crc::stamp(d, 100);
        }
    }

    /// An extent list fork: zero past its last extent.
    fn ex_fork(&mut self, fork: &mut [u8], nex: u64, max: u64) {
        if !self.zero || nex > max {
            return;
        }
        let used = nex.saturating_mul(16);
        if used > fork.len() as u64 {
            return;
        }
        zero(fork, used as usize, fork.len());
    }

    /// A bmbt root in the inode: zero its unused keys and pointers.
    fn bt_fork(&mut self, fork: &mut [u8]) {
        if !self.zero || fork.len() < 4 {
            return;
        }
        let level = be16(fork, 0);
        let n = usize::from(be16(fork, 2));
        if level == 0 || level > 9 {
            return;
        }
        let maxr = (fork.len() - 4) / 16;
        if n > maxr {
            return;
        }
        let ptrs = 4 + maxr * 8;
        zero(fork, 4 + n * 8, ptrs);
        zero(fork, ptrs + n * 8, fork.len());
    }

    fn keep_dirent(&self, dir: u64, child: u64, name: &[u8]) -> bool {
        if self.ascii_ci {
            return true;
        }
        if dir == self.root && name == b"lost+found" {
            return true;
        }
        if let Some(o) = self.orphanage {
            if child == o {
                return true;
            }
            if dir == o && name == child.to_string().as_bytes() {
                return true;
            }
        }
        false
    }

    /// Obfuscates the entry `name` (for inode `child`) of directory `dir`.
    fn dirent(&mut self, dir: u64, child: u64, name: &mut [u8]) {
        if name.is_empty() || self.keep_dirent(dir, child, name) {
            return;
        }
        if let Some(o) = self.obf.as_mut() {
            let h = hashname(name);
            o.name(dir, name);
            debug_assert_eq!(h, hashname(name));
        }
    }

    fn sf_dir(&mut self, dir: u64, fork: &mut [u8], size: u64, meta: bool) {
        let dsize = fork.len();
        let size = (size.min(dsize as u64)) as usize;
        if fork.len() < 6 {
            return;
        }
        let count = usize::from(fork[0]);
        let i8 = fork[1] != 0;
        let inolen = if i8 { 8 } else { 4 };
        let ftype = usize::from(self.geo.features.ftype);
        let entsize = |nl: usize| 3 + nl + ftype + inolen;
        let mut p = 2 + inolen;
        let obf = self.obfuscating() && !meta;
        for i in 0..count {
            if p >= size || p + 3 > dsize {
                break;
            }
            let mut nl = usize::from(fork[p]);
            // A zero length, or an entry past the size: only the last
            // entry is then taken, to the end of the size.
            if nl == 0 || p + entsize(nl) > size {
                if i + 1 != count {
                    break;
                }
                nl = size.saturating_sub(p + 3);
            }
            if obf {
                let io = p + 3 + usize::from(fork[p]) + ftype;
                let child = if io + inolen <= dsize {
                    if i8 {
                        be64(fork, io) & ((1 << 56) - 1)
                    } else {
                        u64::from(be32(fork, io))
                    }
                } else {
                    0
                };
                let end = (p + 3 + nl).min(dsize);
                if p + 3 < end {
                    let mut name = fork[p + 3..end].to_vec();
                    self.dirent(dir, child, &mut name);
                    fork[p + 3..end].copy_from_slice(&name);
                }
            }
            p += entsize(nl);
        }
        if self.zero && size < dsize {
            zero(fork, p, p + (dsize - size));
        }
    }

    /// Obfuscates the path components of a link target in place.
    fn path(&mut self, t: &mut [u8]) {
        let Some(o) = self.obf.as_ref() else { return };
        let n = strlen(t);
        let t = &mut t[..n];
        for comp in t.split_mut(|&c| c == b'/') {
            o.component(comp);
        }
    }

    fn sf_symlink(&mut self, fork: &mut [u8], size: u64) {
        let len = (size.min(fork.len() as u64)) as usize;
        if self.obfuscating() {
            self.path(&mut fork[..len]);
        }
        if self.zero {
            zero(fork, len, fork.len());
        }
    }

    /// Obfuscates a parent pointer's name (its value names the parent).
    fn pptr(&mut self, child: u64, name: &mut [u8], value: &[u8], meta: bool) {
        if meta || value.len() != 12 || name.is_empty() || name.iter().any(|&c| invalid_name(c)) {
            return;
        }
        let parent = be64(value, 0);
        if parent == 0 || self.keep_dirent(parent, child, name) {
            return;
        }
        self.dirent(parent, child, name);
    }

    fn attr_name(&mut self, ino: u64, name: &mut [u8]) {
        if let Some(o) = self.obf.as_mut() {
            o.name(SCOPE_ATTR | ino, name);
        }
    }

    fn sf_attr(&mut self, ino: u64, fork: &mut [u8], meta: bool) {
        if fork.len() < 4 {
            return;
        }
        let count = usize::from(fork[2]);
        if count == 0 {
            return;
        }
        let asize = fork.len();
        let total = usize::from(be16(fork, 0)).min(asize);
        let mut p = 4;
        for _ in 0..count {
            if p >= total || p + 3 > asize {
                break;
            }
            let nl = usize::from(fork[p]);
            let vl = usize::from(fork[p + 1]);
            let flags = fork[p + 2];
            if nl == 0 || p + 3 + nl + vl > total {
                break;
            }
            let (n0, v0) = (p + 3, p + 3 + nl);
            if flags & XFS_ATTR_PARENT != 0 {
                if self.obfuscating() && flags & !XFS_ATTR_PARENT == 0 {
                    let value = fork[v0..v0 + vl].to_vec();
                    let mut name = fork[n0..v0].to_vec();
                    self.pptr(ino, &mut name, &value, meta);
                    fork[n0..v0].copy_from_slice(&name);
                }
            } else if self.obfuscating() && !meta {
                let mut name = fork[n0..v0].to_vec();
                self.attr_name(ino, &mut name);
                fork[n0..v0].copy_from_slice(&name);
                fork[v0..v0 + vl].fill(b'v');
            }
            p += 3 + nl + vl;
        }
        if self.zero && total < asize {
            zero(fork, p, p + (asize - total));
        }
    }

    // ---- directory blocks ----

    fn dir_block(
        &mut self,
        b: &mut [u8],
        ino: u64,
        off: u64,
        block_form: bool,
        single: bool,
        meta: bool,
    ) {
        let geo = self.geo;
        let crc_off = dir_crc_off(b);
        let ok = geo.v5 && crc_off.is_some_and(|o| crc::verify(b, o));
        let bs = geo.block_size as usize;
        if self.zero && single {
            if let Some(m) = xfs_format::da::da_magic(b) {
                if m == 0xfebe || m == 0x3ebe {
                    let hdr = if geo.v5 { 64 } else { 16 };
                    let used = hdr + usize::from(be16(b, if geo.v5 { 56 } else { 12 })) * 8;
                    if used < bs {
                        zero(b, used, bs);
                    }
                }
            }
        }
        let blog = geo.block_log;
        let leafblk = (32u64 << 30) >> blog;
        let freeblk = (64u64 << 30) >> blog;
        if off >= freeblk {
            self.dir_free(b);
        } else if off >= leafblk {
            self.dir_leaf(b);
        } else {
            self.dir_data(b, ino, block_form, meta);
        }
        if let (true, Some(o)) = (ok, crc_off) {
            crc::stamp(b, o);
        }
    }

    fn dir_free(&mut self, b: &mut [u8]) {
        if !self.zero || b.len() < 16 {
            return;
        }
        let magic = be32(b, 0);
        let (hdr, nvalid_off) = match magic {
            0x5844_3246 => (16, 8),  // XD2F
            0x5844_4633 => (64, 52), // XDF3
            _ => return,
        };
        if b.len() < hdr {
            return;
        }
        let nvalid = be32(b, nvalid_off) as usize;
        zero(b, hdr.saturating_add(nvalid.saturating_mul(2)), b.len());
    }

    fn dir_leaf(&mut self, b: &mut [u8]) {
        if !self.zero || b.len() < 16 {
            return;
        }
        let magic = be16(b, 8);
        let v5 = matches!(magic, 0x3df1 | 0x3dff);
        let hdr = if v5 { 64 } else { 16 };
        if b.len() < hdr {
            return;
        }
        let count = usize::from(be16(b, if v5 { 56 } else { 12 }));
        let ents_end = hdr + count * 8;
        let bs = b.len();
        match magic {
            0xd2f1 | 0x3df1 => {
                let bestcount = be32(b, bs - 4) as usize;
                let bests = (bs - 4).saturating_sub(bestcount.saturating_mul(2));
                zero(b, ents_end, bests);
            }
            0xd2ff | 0x3dff => zero(b, ents_end, bs),
            _ => {}
        }
    }

    fn dir_data(&mut self, b: &mut [u8], dir: u64, block_form: bool, meta: bool) {
        let geo = self.geo;
        let bs = b.len();
        if bs < 64 {
            return;
        }
        let (want, end_of_data) = if block_form {
            let count = u64::from(be32(b, bs - 8));
            let end = (bs as i64 - 8) - (count as i64) * 8;
            (if geo.v5 { 0x5844_4233 } else { 0x5844_3242 }, end)
        } else {
            (if geo.v5 { 0x5844_4433 } else { 0x5844_3244 }, bs as i64)
        };
        if be32(b, 0) != want {
            return;
        }
        let ftype = usize::from(geo.features.ftype);
        let obf = self.obfuscating() && !meta;
        let mut off = if geo.v5 { 64usize } else { 16 };
        while off < bs && (off as i64) < end_of_data {
            if off + 4 <= bs && be16(b, off) == 0xffff {
                let len = usize::from(be16(b, off + 2));
                if off as i64 + len as i64 > end_of_data || len == 0 || len % 8 != 0 {
                    return;
                }
                if be16(b, off + len - 2) as usize != off {
                    return;
                }
                if self.zero && len > 6 {
                    zero(b, off + 4, off + len - 2);
                }
                off += len;
                if off as i64 >= end_of_data || off >= bs {
                    return;
                }
            }
            if off + 9 > bs {
                return;
            }
            let nl = usize::from(b[off + 8]);
            let len = (8 + 1 + nl + ftype + 2).div_ceil(8) * 8;
            if off as i64 + len as i64 > end_of_data || off + len > bs {
                return;
            }
            let tag = off + len - 2;
            if usize::from(be16(b, tag)) != off {
                return;
            }
            if obf {
                let child = be64(b, off);
                let mut name = b[off + 9..off + 9 + nl].to_vec();
                self.dirent(dir, child, &mut name);
                b[off + 9..off + 9 + nl].copy_from_slice(&name);
            }
            if self.zero {
                zero(b, off + 9 + nl + 1, tag);
            }
            off += len;
        }
    }

    // ---- attribute blocks ----

    fn attr_block(&mut self, b: &mut [u8], ino: u64, _off: u64, meta: bool) {
        let geo = self.geo;
        let bs = b.len();
        if bs < 32 {
            return;
        }
        let magic16 = be16(b, 8);
        let ok = geo.v5
            && match magic16 {
                0x3bee | 0x3ebe => crc::verify(b, 12),
                _ => be32(b, 0) == 0x5841_524d && crc::verify(b, 12),
            };
        if self.zero && (magic16 == 0xfebe || magic16 == 0x3ebe) {
            let hdr = if geo.v5 { 64 } else { 16 };
            let used = hdr + usize::from(be16(b, if geo.v5 { 56 } else { 12 })) * 8;
            if used < bs {
                zero(b, used, bs);
            }
        }
        if magic16 == 0xfbee || magic16 == 0x3bee {
            self.attr_leaf(b, ino, meta);
        } else if self.obfuscating() && !meta {
            let remote = if geo.v5 {
                be32(b, 0) == 0x5841_524d
            } else {
                magic16 != 0xfebe
            };
            if remote {
                let space = if geo.v5 { bs.saturating_sub(56) } else { bs };
                b[bs - space..].fill(b'v');
            }
        }
        if ok {
            crc::stamp(b, 12);
        }
    }

    fn attr_leaf(&mut self, b: &mut [u8], ino: u64, meta: bool) {
        let geo = self.geo;
        let bs = b.len();
        let v5 = be16(b, 8) == 0x3bee;
        let hdr = if v5 { 80 } else { 32 };
        let count = usize::from(be16(b, if v5 { 56 } else { 12 }));
        let rmt_space = if geo.v5 { bs.saturating_sub(56) } else { bs };
        if count == 0 || count * 8 + hdr > rmt_space {
            return;
        }
        let mut first_name = usize::MAX;
        for i in 0..count {
            let e = hdr + i * 8;
            let nameidx = usize::from(be16(b, e + 4));
            let flags = b[e + 6];
            first_name = first_name.min(nameidx);
            if nameidx > bs {
                break;
            }
            if flags & XFS_ATTR_LOCAL != 0 {
                if nameidx + 3 > bs {
                    break;
                }
                let vl = usize::from(be16(b, nameidx));
                let nl = usize::from(b[nameidx + 2]);
                if nl == 0 {
                    break;
                }
                let (n0, v0) = (nameidx + 3, nameidx + 3 + nl);
                if v0 + vl > bs {
                    break;
                }
                if flags & XFS_ATTR_PARENT != 0 {
                    if self.obfuscating() {
                        let value = b[v0..v0 + vl].to_vec();
                        let mut name = b[n0..v0].to_vec();
                        if flags & !(XFS_ATTR_PARENT | XFS_ATTR_LOCAL) == 0 {
                            self.pptr(ino, &mut name, &value, meta);
                        }
                        b[n0..v0].copy_from_slice(&name);
                    }
                } else if self.obfuscating() && !meta {
                    let mut name = b[n0..v0].to_vec();
                    self.attr_name(ino, &mut name);
                    b[n0..v0].copy_from_slice(&name);
                    b[v0..v0 + vl].fill(b'v');
                }
                if self.zero {
                    let ent = (3 + nl + vl).div_ceil(4) * 4;
                    zero(b, v0 + vl, nameidx + ent);
                }
            } else {
                if nameidx + 9 > bs {
                    break;
                }
                let nl = usize::from(b[nameidx + 8]);
                if nl == 0 || be32(b, nameidx) == 0 {
                    break;
                }
                let n0 = nameidx + 9;
                if n0 + nl > bs {
                    break;
                }
                if flags & XFS_ATTR_PARENT == 0 && self.obfuscating() && !meta {
                    let mut name = b[n0..n0 + nl].to_vec();
                    self.attr_name(ino, &mut name);
                    b[n0..n0 + nl].copy_from_slice(&name);
                }
                if self.zero {
                    let ent = (9 + nl).div_ceil(4) * 4;
                    zero(b, n0 + nl, nameidx + ent);
                }
            }
        }
        if self.zero {
            zero(b, hdr + count * 8, first_name);
        }
    }

    // ---- symbolic link blocks ----

    fn symlink_block(&mut self, b: &mut [u8], meta: bool) {
        let geo = self.geo;
        let bs = geo.block_size as usize;
        let hdr = if geo.v5 { 56 } else { 0 };
        if b.len() < hdr.max(16) {
            return;
        }
        let ok = geo.v5 && crc::verify(b, 12);
        if self.obfuscating() && !meta {
            let end = bs.min(b.len());
            self.path(&mut b[hdr..end]);
        }
        if self.zero {
            let linklen = strlen(&b[hdr..]);
            if linklen + hdr <= bs {
                zero(b, hdr + linklen, bs);
            }
        }
        if ok {
            crc::stamp(b, 12);
        }
    }
}

fn invalid_name(c: u8) -> bool {
    c == 0 || c == b'/'
}

/// Where a directory block keeps its CRC, by its magic (v5 blocks only).
fn dir_crc_off(b: &[u8]) -> Option<usize> {
    if b.len() < 16 {
        return None;
    }
    match be32(b, 0) {
        0x5844_4233 | 0x5844_4433 | 0x5844_4633 => return Some(4),
        _ => {}
    }
    match be16(b, 8) {
        0x3df1 | 0x3dff | 0x3ebe => Some(12),
        _ => None,
    }
}
