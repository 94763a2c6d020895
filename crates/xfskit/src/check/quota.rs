//! Quota counts against what the files use, as xfs_repair's quotacheck
//! compares them: only the kinds whose counts the superblock marks
//! checked and whose quota inode it names. The inode pass adds every
//! file's blocks (data section and realtime apart) and the file itself to
//! its user, group and project; quota files and metadata-directory files
//! are not counted. Then every record of each quota file is read: it must
//! be a valid dquot of its slot's id and kind (magic, version, kind, id,
//! bigtime only where the filesystem has it and never for id 0, a soft
//! limit passed only with its timer running, and on v5 its CRC and
//! UUID), and its counts must be the ones found; an id that owns files
//! must have a record.
//!
//! Filesystems with a metadata directory keep their quota files in it
//! (`/quota/user`, `group`, `project`); a kind marked checked whose file
//! is not found there is left out, and the check says so.

use super::Ctx;
use crate::error::Location;
use crate::geometry::{FsBlock, Ino};
use crate::inode::{Fork, Inode};
use std::collections::BTreeMap;
use std::sync::Mutex;
use xfs_format::quota::*;
use xfs_format::sb::{Dsb, XFS_GQUOTA_CHKD, XFS_OQUOTA_CHKD, XFS_PQUOTA_CHKD, XFS_UQUOTA_CHKD};
use zerocopy::FromBytes;

/// `sb_qflags`: group quota accounting (v4: the shared file is groups').
const XFS_GQUOTA_ACCT: u16 = 0x0040;
/// `sb_qflags`: project quota accounting.
const XFS_PQUOTA_ACCT: u16 = 0x0008;
const NULL_INO: u64 = u64::MAX;

/// What one id uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Count {
    blocks: u64,
    rtblocks: u64,
    inodes: u64,
}

/// One kind of quota being compared.
struct Kind {
    /// `XFS_DQTYPE_USER`, `_GROUP` or `_PROJ`.
    dqtype: u8,
    name: &'static str,
    ino: u64,
    counts: Mutex<BTreeMap<u32, Count>>,
}

impl Kind {
    /// The fix of this kind's counts.
    fn fix(&self) -> super::Fix {
        let kind = match self.dqtype {
            XFS_DQTYPE_USER => crate::quota::Kind::User,
            XFS_DQTYPE_GROUP => crate::quota::Kind::Group,
            _ => crate::quota::Kind::Project,
        };
        super::Fix::RecountQuota { kind }
    }
}

/// The usage the inode pass gathers, per kind compared.
#[derive(Default)]
pub(crate) struct Usage {
    kinds: Vec<Kind>,
    /// Every quota inode the superblock names (never counted).
    quota_inos: Vec<u64>,
}

impl Usage {
    /// The kinds to compare on the filesystem whose primary superblock
    /// sector is `sb0`.
    /// `metadir`: the quota files of a metadata directory, where the
    /// filesystem has one.
    pub(crate) fn new(sb0: &[u8], v5: bool, metadir: Option<[Option<u64>; 3]>) -> Usage {
        let Ok((sb, _)) = Dsb::ref_from_prefix(sb0) else {
            return Usage::default();
        };
        let q = sb.sb_qflags.get();
        let (u, g, p) = match metadir {
            Some([u, g, p]) => (u.unwrap_or(0), g.unwrap_or(0), p.unwrap_or(0)),
            None => (
                sb.sb_uquotino.get(),
                sb.sb_gquotino.get(),
                if v5 { sb.sb_pquotino.get() } else { 0 },
            ),
        };
        let valid = |i: u64| i != 0 && i != NULL_INO;
        let mut out = Usage {
            kinds: Vec::new(),
            quota_inos: [u, g, p].into_iter().filter(|&i| valid(i)).collect(),
        };
        let mut want = vec![(XFS_DQTYPE_USER, "user quota", u, q & XFS_UQUOTA_CHKD != 0)];
        if v5 {
            want.push((XFS_DQTYPE_GROUP, "group quota", g, q & XFS_GQUOTA_CHKD != 0));
            want.push((
                XFS_DQTYPE_PROJ,
                "project quota",
                p,
                q & XFS_PQUOTA_CHKD != 0,
            ));
        } else if q & XFS_OQUOTA_CHKD != 0 {
            // v4 keeps groups or projects in the one other file.
            if q & XFS_GQUOTA_ACCT != 0 {
                want.push((XFS_DQTYPE_GROUP, "group quota", g, true));
            } else if q & XFS_PQUOTA_ACCT != 0 {
                want.push((XFS_DQTYPE_PROJ, "project quota", g, true));
            }
        }
        for (dqtype, name, ino, checked) in want {
            if checked && valid(ino) {
                out.kinds.push(Kind {
                    dqtype,
                    name,
                    ino,
                    counts: Mutex::new(BTreeMap::new()),
                });
            }
        }
        out
    }

    /// Adds inode `ino` (its realtime blocks `rtblocks`) to its owners.
    pub(crate) fn add(&self, ino: &Inode, rtblocks: u64) {
        if self.kinds.is_empty()
            || self.quota_inos.contains(&ino.ino.0)
            || ino.flags2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0
        {
            return;
        }
        for k in &self.kinds {
            let id = match k.dqtype {
                XFS_DQTYPE_USER => ino.uid,
                XFS_DQTYPE_GROUP => ino.gid,
                _ => ino.projid,
            };
            let mut m = k.counts.lock().unwrap_or_else(|p| p.into_inner());
            let c = m.entry(id).or_default();
            c.blocks += ino.nblocks.saturating_sub(rtblocks);
            c.rtblocks += rtblocks;
            c.inodes += 1;
        }
    }

    /// Compares every record of each quota file with the counts found.
    pub(crate) fn finish(&self, ctx: &Ctx<'_>) {
        for k in &self.kinds {
            let counts = std::mem::take(&mut *k.counts.lock().unwrap_or_else(|p| p.into_inner()));
            compare(ctx, k, counts);
        }
    }
}

fn compare(ctx: &Ctx<'_>, k: &Kind, mut counts: BTreeMap<u32, Count>) {
    let fs = ctx.fs;
    let geo = fs.geometry();
    let inode = match fs.inode(Ino(k.ino)) {
        Ok(i) => i,
        Err(e) => {
            ctx.sink.add(
                k.name,
                Location::Inode(k.ino),
                format!("its file cannot be read: {e}"),
            );
            return;
        }
    };
    let ext = match crate::inode::extents(fs, &inode, Fork::Data) {
        Ok(e) => e,
        Err(e) => {
            ctx.sink.add(
                k.name,
                Location::Inode(k.ino),
                format!("its mapping cannot be read: {e}"),
            );
            return;
        }
    };
    let bs = geo.block_size as usize;
    let per_block = (bs / XFS_DQBLK_SIZE) as u64;
    let mut buf = vec![0u8; bs];
    let mut seen = std::collections::BTreeSet::new();
    for e in &ext {
        for b in 0..e.len {
            let at = Location::InodeBlock {
                ino: k.ino,
                fork: "data",
                offset: e.offset + b,
            };
            let fsb = FsBlock(e.start.0 + b);
            if fs
                .read_bytes(geo.fsb_to_daddr(fsb).bytes(), &mut buf)
                .is_err()
            {
                ctx.sink.add(k.name, at, "cannot read the block");
                return;
            }
            let first = (e.offset + b) * per_block;
            // A block that fails the verifier is not compared (xfs_repair
            // cannot read it, and stops comparing).
            let mut bad = None;
            for j in 0..per_block {
                let id = first + j;
                if id > u64::from(u32::MAX) {
                    break;
                }
                let rec = &buf[j as usize * XFS_DQBLK_SIZE..(j as usize + 1) * XFS_DQBLK_SIZE];
                if let Some(why) = crate::quota::record_problem(geo, rec, id as u32, k.dqtype) {
                    bad = Some(format!("dquot {id}: {why}"));
                    break;
                }
            }
            if let Some(why) = bad {
                ctx.sink.add_fix(
                    k.name,
                    at,
                    format!("dquot block fails verification: {why}"),
                    k.fix(),
                );
                return;
            }
            for j in 0..per_block {
                let id = first + j;
                if id > u64::from(u32::MAX) {
                    break;
                }
                let rec = &buf[j as usize * XFS_DQBLK_SIZE..(j as usize + 1) * XFS_DQBLK_SIZE];
                let d = DiskDquot::ref_from_prefix(rec).expect("136 bytes").0;
                let id = id as u32;
                seen.insert(id);
                let want = counts.remove(&id).unwrap_or_default();
                let loc = || Location::Inode(k.ino);
                for (field, have, want) in [
                    ("bcount", d.d_bcount.get(), want.blocks),
                    ("rtbcount", d.d_rtbcount.get(), want.rtblocks),
                    ("icount", d.d_icount.get(), want.inodes),
                ] {
                    if have != want {
                        ctx.sink.add_fix(
                            k.name,
                            loc(),
                            format!("id {id} has {field} {have}, expected {want}"),
                            k.fix(),
                        );
                    }
                }
            }
        }
    }
    for (id, c) in counts {
        ctx.sink.add_fix(
            k.name,
            Location::Inode(k.ino),
            format!(
                "record for id {id} not found on disk (bcount {} rtbcount {} icount {})",
                c.blocks, c.rtblocks, c.inodes
            ),
            k.fix(),
        );
    }
}
