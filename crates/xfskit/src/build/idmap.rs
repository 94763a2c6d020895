//! Owner mapping for `xfskit build`: `--owner`, `--uid-map`, `--gid-map`.
//!
//! The conventions are those of Linux user namespaces (`/proc/PID/uid_map`,
//! `newuidmap`, `systemd-nspawn --private-users`): a map is a list of ranges
//! `FROM:TO[:COUNT]` sending ids `FROM..FROM+COUNT` of the source to
//! `TO..TO+COUNT` in the image (COUNT defaults to 1). Ids outside every
//! range are kept. `--owner UID:GID` forces every inode to one owner, like
//! `tar --owner/--group` or `mkfs.erofs --all-root`; it wins over the maps.
//! Numeric ids are used throughout; tar user and group names are ignored
//! (as `tar --numeric-owner` does).
//!
//! POSIX ACLs (`system.posix_acl_access`/`_default`) name users and groups
//! too; [`IdMap::map_xattr`] rewrites the ids in them the same way.

use crate::error::{Error, Result};

/// One range of a map: `count` ids from `from` go to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// First id in the source.
    pub from: u32,
    /// First id in the image.
    pub to: u32,
    /// Number of ids in the range (at least 1).
    pub count: u32,
}

/// How source owners become image owners.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdMap {
    /// `--owner UID:GID`: every inode gets this owner.
    pub owner: Option<(u32, u32)>,
    /// `--uid-map`: user id ranges.
    pub uids: Vec<IdRange>,
    /// `--gid-map`: group id ranges.
    pub gids: Vec<IdRange>,
}

fn num(text: &str, what: &str) -> Result<u32> {
    text.trim().parse::<u32>().map_err(|_| {
        Error::Invalid(format!(
            "{what}: {text:?} is not a number from 0 to 4294967295"
        ))
    })
}

/// Parses `UID:GID` (both numeric).
pub fn parse_owner(text: &str) -> Result<(u32, u32)> {
    let (u, g) = text
        .split_once(':')
        .ok_or_else(|| Error::Invalid(format!("--owner takes UID:GID, not {text:?}")))?;
    Ok((num(u, "--owner uid")?, num(g, "--owner gid")?))
}

/// Parses `FROM:TO[:COUNT][,FROM:TO[:COUNT]...]`. Ranges may not overlap on
/// the source side (an id would have two meanings).
pub fn parse_map(text: &str, what: &str) -> Result<Vec<IdRange>> {
    let mut out: Vec<IdRange> = Vec::new();
    for item in text.split(',').filter(|s| !s.trim().is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(Error::Invalid(format!(
                "{what}: {item:?} is not FROM:TO or FROM:TO:COUNT"
            )));
        }
        let from = num(parts[0], what)?;
        let to = num(parts[1], what)?;
        let count = match parts.get(2) {
            Some(c) => num(c, what)?,
            None => 1,
        };
        let fits = |start: u32| u64::from(start) + u64::from(count) <= 1 << 32;
        if count == 0 || !fits(from) || !fits(to) {
            return Err(Error::Invalid(format!(
                "{what}: range {item:?} is empty or runs past 4294967295"
            )));
        }
        let r = IdRange { from, to, count };
        if let Some(o) = out.iter().find(|o| {
            u64::from(o.from) < u64::from(from) + u64::from(count)
                && u64::from(from) < u64::from(o.from) + u64::from(o.count)
        }) {
            return Err(Error::Invalid(format!(
                "{what}: range {item:?} overlaps {}:{}:{}",
                o.from, o.to, o.count
            )));
        }
        out.push(r);
    }
    Ok(out)
}

fn apply(ranges: &[IdRange], id: u32) -> u32 {
    for r in ranges {
        if id >= r.from && id - r.from < r.count {
            return r.to + (id - r.from);
        }
    }
    id
}

/// ACL entry tags that carry an id (`ACL_USER`, `ACL_GROUP`).
const ACL_USER: u16 = 0x02;
const ACL_GROUP: u16 = 0x08;

impl IdMap {
    /// True when nothing is changed.
    pub fn is_identity(&self) -> bool {
        self.owner.is_none() && self.uids.is_empty() && self.gids.is_empty()
    }

    /// The image user id for a source user id.
    pub fn uid(&self, uid: u32) -> u32 {
        match self.owner {
            Some((u, _)) => u,
            None => apply(&self.uids, uid),
        }
    }

    /// The image group id for a source group id.
    pub fn gid(&self, gid: u32) -> u32 {
        match self.owner {
            Some((_, g)) => g,
            None => apply(&self.gids, gid),
        }
    }

    /// Rewrites the user and group ids inside a POSIX ACL xattr value (Linux
    /// VFS format: a 4-byte version, then 8-byte entries of tag, permissions
    /// and id, all little-endian). Other xattrs, and values that are not a
    /// well-formed ACL, are returned unchanged. With `--owner`, named entries
    /// keep their ids: forcing the owner says nothing about other users.
    pub fn map_xattr(&self, name: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        let acl = name == b"system.posix_acl_access" || name == b"system.posix_acl_default";
        if !acl || self.owner.is_some() || (self.uids.is_empty() && self.gids.is_empty()) {
            return None;
        }
        if value.len() < 4 || !(value.len() - 4).is_multiple_of(8) {
            return None;
        }
        let mut out = value.to_vec();
        for e in out[4..].chunks_exact_mut(8) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let mapped = match tag {
                ACL_USER => apply(&self.uids, id),
                ACL_GROUP => apply(&self.gids, id),
                _ => continue,
            };
            e[4..8].copy_from_slice(&mapped.to_le_bytes());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let m = IdMap {
            owner: None,
            uids: parse_map("0:100000:65536,70000:5", "--uid-map").unwrap(),
            gids: parse_map("100:0", "--gid-map").unwrap(),
        };
        assert_eq!(m.uid(0), 100000);
        assert_eq!(m.uid(1000), 101000);
        assert_eq!(m.uid(70000), 5);
        assert_eq!(m.uid(70001), 70001);
        assert_eq!(m.gid(100), 0);
        assert_eq!(m.gid(101), 101);
        assert!(parse_map("0:1:10,5:7", "x").is_err());
        assert!(parse_map("1:2:0", "x").is_err());
        assert!(parse_map("4294967295:0:2", "x").is_err());
        assert!(parse_map("1", "x").is_err());
    }

    #[test]
    fn owner_wins() {
        let m = IdMap {
            owner: Some(parse_owner("0:0").unwrap()),
            uids: parse_map("0:5", "x").unwrap(),
            gids: vec![],
        };
        assert_eq!((m.uid(1000), m.gid(1000)), (0, 0));
        assert!(parse_owner("0").is_err());
    }

    #[test]
    fn acl_ids() {
        let m = IdMap {
            owner: None,
            uids: parse_map("1000:2000", "x").unwrap(),
            gids: vec![],
        };
        let mut v = 2u32.to_le_bytes().to_vec();
        v.extend_from_slice(&[0x02, 0, 6, 0]);
        v.extend_from_slice(&1000u32.to_le_bytes());
        let out = m.map_xattr(b"system.posix_acl_access", &v).unwrap();
        assert_eq!(&out[8..12], &2000u32.to_le_bytes());
        assert!(m.map_xattr(b"user.x", &v).is_none());
    }
}
