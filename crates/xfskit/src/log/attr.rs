//! After replay: attribute update intents (ATTRIs) without their done
//! item (ATTRD).
//!
//! With logged extended attributes, an attribute change logs an ATTRI
//! holding the whole operation: the inode, the operation, the namespace
//! filter and, in further regions, the name, the new name (parent
//! pointer replaces only), the value and the new value. Regions are in
//! that order, each padded to four bytes; a region is there only when its
//! length is not zero (a set with an empty value has two regions: the
//! kernel here replays it so).
//!
//! Every ATTRI of the log is checked as the kernel checks it while it
//! reads the log, done or not: a format region of 40 bytes, no unknown
//! operation or filter bits, at most one namespace bit, a known
//! operation with name and value lengths it allows (names of 1 to 255
//! bytes without NUL, values up to 64 KiB, none for a remove, a 12-byte
//! parent record for the parent pointer operations, which also need the
//! parent filter bit), the regions the lengths announce and no others, and
//! a valid inode number. The plain operations (set, replace, remove) are
//! accepted only when the superblock has the logged-xattrs log-incompat
//! bit, the parent pointer ones only on a filesystem with parent pointers.
//!
//! Recovery finishes an unfinished ATTRI as the kernel does: on the inode
//! (which must be in use), a set or a replace stores the value whether or
//! not the name exists, a remove takes the name away if it is there, and
//! nothing else changes (no timestamps). An inode without an attribute
//! fork is left alone by a set or replace too: the kernel adds the fork
//! before it logs such an intent, and its recovery calls the operation
//! done when the fork is missing. The ATTRD is logged in the same
//! transaction. Parent pointer operations first check the inode's
//! generation against the intent's, then work on the pointer named by
//! name and value (several pointers may share a name): a set stores it
//! once, a remove takes it away if there, a replace removes the old one
//! if there and sets the new one. A plain operation with the parent
//! filter bit, and the "incomplete" filter bit, are refused as
//! unsupported.

use crate::attr::Namespace;
use crate::bytes::{le32, le64};
use crate::error::{Error, Location, Result};
use crate::geometry::{Geometry, Ino};
use xfs_format::attr::{XFS_ATTR_INCOMPLETE, XFS_ATTR_NSP_ONDISK_MASK, XFS_ATTR_PARENT};
use xfs_format::attr::{XFS_ATTR_ROOT, XFS_ATTR_SECURE};
use xfs_format::log_intent::*;

/// Filter bits an ATTRI may carry.
const FILTER_MASK: u32 =
    (XFS_ATTR_ROOT | XFS_ATTR_SECURE | XFS_ATTR_PARENT | XFS_ATTR_INCOMPLETE) as u32;
/// Longest attribute name.
const NAME_MAX: usize = 255;
/// Largest attribute value.
const VALUE_MAX: usize = 65536;
/// Size of a parent pointer value (`xfs_parent_rec`: inode and generation).
const PARENT_REC: usize = 12;

/// An attribute update intent as logged (`xfs_attri_log_format` and the
/// regions after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attri {
    /// `alfi_id`.
    pub id: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// The inode whose attributes change.
    pub ino: u64,
    /// Its generation (checked by parent pointer operations only).
    pub igen: u32,
    /// Operation (`XFS_ATTRI_OP_FLAGS_*`).
    pub op: u32,
    /// Namespace filter (`XFS_ATTR_ROOT`, `SECURE`, `PARENT`, `INCOMPLETE`).
    pub filter: u32,
    /// The name (the old name of a parent pointer replace).
    pub name: Vec<u8>,
    /// The new name of a parent pointer replace.
    pub new_name: Vec<u8>,
    /// The value (none for a remove).
    pub value: Vec<u8>,
    /// The new value of a parent pointer replace.
    pub new_value: Vec<u8>,
}

/// The operation's name as `xfskit log` shows it.
pub fn op_name(op: u32) -> &'static str {
    match op {
        XFS_ATTRI_OP_FLAGS_SET => "set",
        XFS_ATTRI_OP_FLAGS_REMOVE => "remove",
        XFS_ATTRI_OP_FLAGS_REPLACE => "replace",
        XFS_ATTRI_OP_FLAGS_PPTR_SET => "parent pointer set",
        XFS_ATTRI_OP_FLAGS_PPTR_REMOVE => "parent pointer remove",
        XFS_ATTRI_OP_FLAGS_PPTR_REPLACE => "parent pointer replace",
        _ => "unknown",
    }
}

fn name_len_ok(n: usize) -> bool {
    (1..=NAME_MAX).contains(&n)
}

impl Attri {
    /// Decodes an ATTRI from its regions with the kernel's checks of the
    /// item alone; the error says what is wrong.
    pub fn parse(regions: &[Vec<u8>], rec_blk: u64) -> std::result::Result<Attri, String> {
        let f = &regions[0];
        if f.len() != XFS_ATTRI_LOG_FORMAT_SIZE {
            return Err(format!("ATTRI format region of {} bytes", f.len()));
        }
        let id = le64(f, 8);
        let bad = |d: String| format!("ATTRI {id:#x}: {d}");
        let op_flags = le32(f, 24);
        let name_field = le32(f, 28);
        let value_len = le32(f, 32) as usize;
        let filter = le32(f, 36);
        if op_flags & !XFS_ATTRI_OP_FLAGS_TYPE_MASK != 0 {
            return Err(bad(format!("unknown operation flags {op_flags:#x}")));
        }
        if filter & !FILTER_MASK != 0 {
            return Err(bad(format!("unknown filter bits {filter:#x}")));
        }
        if (filter & u32::from(XFS_ATTR_NSP_ONDISK_MASK)).count_ones() > 1 {
            return Err(bad(format!(
                "filter {filter:#x} names more than one namespace"
            )));
        }
        let parent = filter & u32::from(XFS_ATTR_PARENT) != 0;
        let op = op_flags;
        // (name, new name, value, new value) lengths the op allows.
        let (name_len, new_name_len, new_value_len) = match op {
            XFS_ATTRI_OP_FLAGS_SET | XFS_ATTRI_OP_FLAGS_REPLACE => {
                if value_len > VALUE_MAX {
                    return Err(bad(format!("value of {value_len} bytes")));
                }
                (name_field as usize, 0, 0)
            }
            XFS_ATTRI_OP_FLAGS_REMOVE => {
                if value_len != 0 {
                    return Err(bad(format!("remove with a value of {value_len} bytes")));
                }
                (name_field as usize, 0, 0)
            }
            XFS_ATTRI_OP_FLAGS_PPTR_SET | XFS_ATTRI_OP_FLAGS_PPTR_REMOVE => {
                if value_len != PARENT_REC || !parent {
                    return Err(bad(format!(
                        "parent pointer operation with a value of {value_len} bytes, filter {filter:#x}"
                    )));
                }
                (name_field as usize, 0, 0)
            }
            XFS_ATTRI_OP_FLAGS_PPTR_REPLACE => {
                if value_len != PARENT_REC || !parent {
                    return Err(bad(format!(
                        "parent pointer operation with a value of {value_len} bytes, filter {filter:#x}"
                    )));
                }
                let new = (name_field >> 16) as usize;
                if !name_len_ok(new) {
                    return Err(bad(format!("new name of {new} bytes")));
                }
                ((name_field & 0xffff) as usize, new, value_len)
            }
            _ => return Err(bad(format!("unknown operation {op}"))),
        };
        if !name_len_ok(name_len) {
            return Err(bad(format!("name of {name_len} bytes")));
        }
        // The regions the lengths announce, in order, each padded to 4.
        let want: Vec<(usize, &str)> = [
            (name_len, "name"),
            (new_name_len, "new name"),
            (value_len, "value"),
            (new_value_len, "new value"),
        ]
        .into_iter()
        .filter(|&(n, _)| n > 0)
        .collect();
        if regions.len() != 1 + want.len() {
            return Err(bad(format!(
                "{} operation in {} regions, {} expected",
                op_name(op),
                regions.len(),
                1 + want.len()
            )));
        }
        let mut parts = Vec::new();
        for (r, &(n, what)) in regions[1..].iter().zip(&want) {
            if r.len() != n.next_multiple_of(4) {
                return Err(bad(format!(
                    "{what} of {n} bytes in a region of {} bytes",
                    r.len()
                )));
            }
            parts.push(r[..n].to_vec());
        }
        for (p, &(_, what)) in parts.iter().zip(&want) {
            if what.ends_with("name") && p.contains(&0) {
                return Err(bad(format!("{what} holds a NUL byte")));
            }
            // A parent pointer's name is a directory entry name.
            if what.ends_with("name") && parent && p.contains(&b'/') {
                return Err(bad(format!("parent pointer {what} holds a slash")));
            }
        }
        let mut it = parts.into_iter();
        let name = it.next().unwrap_or_default();
        let new_name = if new_name_len > 0 {
            it.next().unwrap_or_default()
        } else {
            Vec::new()
        };
        let value = if value_len > 0 {
            it.next().unwrap_or_default()
        } else {
            Vec::new()
        };
        let new_value = if new_value_len > 0 {
            it.next().unwrap_or_default()
        } else {
            Vec::new()
        };
        Ok(Attri {
            id,
            rec_blk,
            ino: le64(f, 16),
            igen: le32(f, 4),
            op,
            filter,
            name,
            new_name,
            value,
            new_value,
        })
    }

    fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::corrupt(
            "attribute intent",
            Location::Log {
                block: self.rec_blk,
            },
            format!("intent {:#x}: {}", self.id, detail.into()),
        )
    }

    /// A parent pointer operation.
    pub fn is_parent_op(&self) -> bool {
        matches!(
            self.op,
            XFS_ATTRI_OP_FLAGS_PPTR_SET
                | XFS_ATTRI_OP_FLAGS_PPTR_REMOVE
                | XFS_ATTRI_OP_FLAGS_PPTR_REPLACE
        )
    }

    /// The kernel's checks against the filesystem: the feature the
    /// operation needs (from the superblock as it was before replay) and
    /// the inode number.
    pub fn check_fs(&self, geo: &Geometry) -> Result<()> {
        if self.is_parent_op() {
            if geo.features_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT == 0 {
                return Err(self.corrupt("parent pointer operation without parent pointers"));
            }
        } else if geo.features_log_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_LOG_XATTRS == 0 {
            return Err(self
                .corrupt("the superblock lacks the logged extended attributes log-incompat bit"));
        }
        if !geo.ino_valid(Ino(self.ino)) {
            return Err(self.corrupt(format!("inode {} is not a valid inode number", self.ino)));
        }
        if self.filter & u32::from(XFS_ATTR_PARENT) != 0 {
            for (what, v) in [("value", &self.value), ("new value", &self.new_value)] {
                if v.len() != PARENT_REC {
                    continue;
                }
                let p = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
                if !geo.ino_valid(Ino(p)) {
                    return Err(self.corrupt(format!(
                        "parent pointer {what} names parent inode {p}, not a valid inode number"
                    )));
                }
            }
        }
        Ok(())
    }

    /// What recovery cannot finish: a plain operation in the parent
    /// pointer namespace and the "incomplete" filter bit.
    pub fn check_supported(&self) -> Result<()> {
        if !self.is_parent_op() && self.filter & u32::from(XFS_ATTR_PARENT) != 0 {
            return Err(Error::Unsupported(format!(
                "attribute intent {:#x} (log block {}): {} in the parent pointer namespace",
                self.id,
                self.rec_blk,
                op_name(self.op)
            )));
        }
        if self.filter & u32::from(XFS_ATTR_INCOMPLETE) != 0 {
            return Err(Error::Unsupported(format!(
                "attribute intent {:#x} (log block {}): the incomplete filter bit",
                self.id, self.rec_blk
            )));
        }
        Ok(())
    }

    fn namespace(&self) -> Namespace {
        let f = self.filter as u8;
        if f & XFS_ATTR_ROOT != 0 {
            Namespace::Trusted
        } else if f & XFS_ATTR_SECURE != 0 {
            Namespace::Security
        } else {
            Namespace::User
        }
    }
}

/// Finishes `a` inside `tp` (which the caller commits with the ATTRD).
pub(crate) fn finish_attri(tp: &mut crate::trans::Trans<'_>, a: &Attri) -> Result<()> {
    a.check_supported()?;
    let ino = Ino(a.ino);
    if !tp.geo().ino_valid(ino) {
        return Err(a.corrupt(format!("inode {} is not a valid inode number", a.ino)));
    }
    tp.lock_inode(ino);
    let mut ip = tp
        .read_inode(ino)
        .map_err(|e| a.corrupt(format!("inode {}: {e}", a.ino)))?;
    if ip.mode == 0 {
        return Err(a.corrupt(format!("inode {} is free", a.ino)));
    }
    if a.is_parent_op() {
        if ip.gen != a.igen {
            return Err(a.corrupt(format!(
                "inode {} has generation {}, the intent {}",
                a.ino, ip.gen, a.igen
            )));
        }
        finish_parent(tp, &mut ip, a)?;
        return tp.log_inode(&ip);
    }
    let ns = a.namespace();
    match a.op {
        XFS_ATTRI_OP_FLAGS_SET | XFS_ATTRI_OP_FLAGS_REPLACE => {
            // The kernel's logged set adds the attribute fork before it
            // logs the intent; its recovery finds an inode without one
            // done, and changes nothing.
            if !ip.has_attr_fork() {
                return Ok(());
            }
            crate::attr::write::set_disk_in(tp, &mut ip, ns, &a.name, &a.value)?;
        }
        XFS_ATTRI_OP_FLAGS_REMOVE => {
            match crate::attr::write::remove(tp, &mut ip, ns, &a.name) {
                // Already gone: the remove is done.
                Err(Error::NoAttr(_)) => return Ok(()),
                r => r?,
            }
            crate::symlink::symlink_to_local(tp, &mut ip)?;
        }
        _ => return Err(a.corrupt(format!("operation {}", a.op))),
    }
    tp.log_inode(&ip)
}

/// Finishes a parent pointer operation on `ip` (generation checked).
/// A set or replace on an inode without an attribute fork is done
/// already, as for the plain operations. A set stores the pointer once
/// (an identical one is replaced); a remove takes it away if there; a
/// replace removes the old pointer if there, then sets the new one.
fn finish_parent(
    tp: &mut crate::trans::Trans<'_>,
    ip: &mut crate::inode::Inode,
    a: &Attri,
) -> Result<()> {
    use crate::attr::write::{remove_parent, set_parent};
    let gone_ok = |r: Result<()>| match r {
        Err(Error::NoAttr(_)) => Ok(()),
        r => r,
    };
    match a.op {
        XFS_ATTRI_OP_FLAGS_PPTR_SET => {
            if ip.has_attr_fork() {
                set_parent(tp, ip, &a.name, &a.value)?;
            }
        }
        XFS_ATTRI_OP_FLAGS_PPTR_REMOVE => {
            gone_ok(remove_parent(tp, ip, &a.name, &a.value))?;
            crate::symlink::symlink_to_local(tp, ip)?;
        }
        XFS_ATTRI_OP_FLAGS_PPTR_REPLACE => {
            if ip.has_attr_fork() {
                gone_ok(remove_parent(tp, ip, &a.name, &a.value))?;
                set_parent(tp, ip, &a.new_name, &a.new_value)?;
            }
        }
        _ => return Err(a.corrupt(format!("operation {}", a.op))),
    }
    Ok(())
}

/// The regions of an ATTRI item for `a` (the test hook
/// [`crate::fs::Fs::log_raw_item`] logs them): the format, then each
/// non-empty name and value, padded to four bytes.
pub fn attri_regions(a: &Attri) -> Vec<Vec<u8>> {
    let parts: Vec<&Vec<u8>> = [&a.name, &a.new_name, &a.value, &a.new_value]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    let mut f = Vec::with_capacity(XFS_ATTRI_LOG_FORMAT_SIZE);
    f.extend_from_slice(&xfs_format::log_item::XFS_LI_ATTRI.to_le_bytes());
    f.extend_from_slice(&(1 + parts.len() as u16).to_le_bytes());
    f.extend_from_slice(&a.igen.to_le_bytes());
    f.extend_from_slice(&a.id.to_le_bytes());
    f.extend_from_slice(&a.ino.to_le_bytes());
    f.extend_from_slice(&a.op.to_le_bytes());
    let name_field = if a.op == XFS_ATTRI_OP_FLAGS_PPTR_REPLACE {
        a.name.len() as u32 | (a.new_name.len() as u32) << 16
    } else {
        a.name.len() as u32
    };
    f.extend_from_slice(&name_field.to_le_bytes());
    f.extend_from_slice(&(a.value.len() as u32).to_le_bytes());
    f.extend_from_slice(&a.filter.to_le_bytes());
    let mut out = vec![f];
    for p in parts {
        let mut r = p.clone();
        r.resize(p.len().next_multiple_of(4), 0);
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Attri {
        Attri {
            id: 7,
            rec_blk: 3,
            ino: 131,
            igen: 0,
            op: XFS_ATTRI_OP_FLAGS_SET,
            filter: 0,
            name: b"abcde".to_vec(),
            new_name: Vec::new(),
            value: b"xyz".to_vec(),
            new_value: Vec::new(),
        }
    }

    #[test]
    fn round_trip_and_checks() {
        let a = sample();
        let r = attri_regions(&a);
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].len(), 8);
        assert_eq!(Attri::parse(&r, 3).unwrap(), a);
        // A remove has no value region.
        let mut rm = sample();
        rm.op = XFS_ATTRI_OP_FLAGS_REMOVE;
        rm.value.clear();
        assert_eq!(Attri::parse(&attri_regions(&rm), 3).unwrap(), rm);
        // Bad lengths, flags, filters and region counts are refused.
        let mut bad = r.clone();
        bad[0][28] = 9;
        assert!(Attri::parse(&bad, 3)
            .unwrap_err()
            .contains("name of 9 bytes"));
        let mut bad = r.clone();
        bad[0][25] = 1;
        assert!(Attri::parse(&bad, 3).is_err());
        let mut bad = r.clone();
        bad[0][36] = XFS_ATTR_ROOT | XFS_ATTR_SECURE;
        assert!(Attri::parse(&bad, 3).is_err());
        let mut bad = r.clone();
        bad[0][36] = 1;
        assert!(Attri::parse(&bad, 3).is_err());
        assert!(Attri::parse(&r[..2], 3).is_err());
        let mut bad = r.clone();
        bad[1][0] = 0;
        assert!(Attri::parse(&bad, 3).unwrap_err().contains("NUL"));
        let mut bad = r;
        bad[0][24] = 9;
        assert!(Attri::parse(&bad, 3).is_err());
        // A parent pointer name is a directory entry name: no slash.
        let mut pp = sample();
        pp.op = XFS_ATTRI_OP_FLAGS_PPTR_SET;
        pp.filter = u32::from(XFS_ATTR_PARENT);
        pp.value = vec![0, 0, 0, 0, 0, 0, 0, 128, 0, 0, 0, 1];
        assert_eq!(Attri::parse(&attri_regions(&pp), 3).unwrap(), pp);
        pp.name = b"a/b".to_vec();
        assert!(Attri::parse(&attri_regions(&pp), 3)
            .unwrap_err()
            .contains("slash"));
    }
}
