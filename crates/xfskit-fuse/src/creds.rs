//! Who sent a request, as far as a rule needs more than the uid: a FUSE
//! request carries the caller's fs uid, fs gid and thread id, but not its
//! supplementary groups or capabilities, which /proc/<tid>/status shows
//! (the thread's own credentials, "Groups:" and "CapEff:").
//!
//! Used where the kernel leaves a decision to the server (or where the
//! server checks again what the kernel checked): the file attribute
//! ioctls' owner, CAP_FOWNER and CAP_LINUX_IMMUTABLE rules
//! ([`crate::ioctl`]), and setting an
//! access ACL clears set-group-id unless the caller is in the file's group
//! or has CAP_FSETID (the kernel would say so with
//! `FUSE_SETXATTR_ACL_KILL_SGID`, but only with `FUSE_SETXATTR_EXT`, a
//! request layout fuser 0.18 does not parse).

use crate::names::Caller;

/// CAP_FOWNER's bit in a capability set.
pub(crate) const CAP_FOWNER: u64 = 1 << 3;
/// CAP_FSETID's bit.
pub(crate) const CAP_FSETID: u64 = 1 << 4;
/// CAP_LINUX_IMMUTABLE's bit.
pub(crate) const CAP_LINUX_IMMUTABLE: u64 = 1 << 9;
/// CAP_SYS_ADMIN's bit.
pub(crate) const CAP_SYS_ADMIN: u64 = 1 << 21;

/// What /proc/<tid>/status says of a thread: supplementary groups and
/// effective capabilities.
#[derive(Debug, Default, PartialEq, Eq)]
struct Status {
    groups: Vec<u32>,
    cap_eff: Option<u64>,
}

fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        if let Some(g) = line.strip_prefix("Groups:") {
            s.groups = g
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
        } else if let Some(c) = line.strip_prefix("CapEff:") {
            s.cap_eff = u64::from_str_radix(c.trim(), 16).ok();
        }
    }
    s
}

impl Caller {
    /// Whether the caller is in group `gid` (its fs gid or a
    /// supplementary group) or has CAP_FSETID: the kernel's test for
    /// keeping set-group-id. Where the thread's status cannot be read (it
    /// is gone, or in another pid namespace) root is taken to have
    /// CAP_FSETID and nobody to have supplementary groups.
    pub(crate) fn in_group_or_fsetid(&self, gid: u32) -> bool {
        if self.gid == gid {
            return true;
        }
        decide(self, &self.status(), gid)
    }

    /// Whether the caller has capability `cap` (a bit of
    /// [`CAP_FOWNER`] and the like) in its effective set; where the
    /// thread's status cannot be read, root is taken to have it.
    pub(crate) fn capable(&self, cap: u64) -> bool {
        has_cap(self, &self.status(), cap)
    }

    fn status(&self) -> Status {
        (self.pid != 0)
            .then(|| std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok())
            .flatten()
            .map(|t| parse_status(&t))
            .unwrap_or_default()
    }
}

fn has_cap(c: &Caller, s: &Status, cap: u64) -> bool {
    match s.cap_eff {
        Some(caps) => caps & cap != 0,
        None => c.uid == 0,
    }
}

fn decide(c: &Caller, s: &Status, gid: u32) -> bool {
    c.gid == gid || has_cap(c, s, CAP_FSETID) || s.groups.contains(&gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsetfacl\nUid:\t1000\t1000\t1000\t1000\n\
        Gid:\t1001\t1001\t1001\t1001\nGroups:\t27 1000 \nCapInh:\t0000000000000000\n\
        CapEff:\t0000000000000000\n";

    #[test]
    fn status_lines() {
        let s = parse_status(STATUS);
        assert_eq!(s.groups, vec![27, 1000]);
        assert_eq!(s.cap_eff, Some(0));
        let root = parse_status("Groups:\t\nCapEff:\t000001ffffffffef\n");
        assert!(root.groups.is_empty());
        assert_eq!(root.cap_eff.map(|c| c & CAP_FSETID), Some(0));
    }

    #[test]
    fn group_or_capability() {
        let user = Caller {
            uid: 1000,
            gid: 1001,
            pid: 1,
        };
        let s = parse_status(STATUS);
        assert!(decide(&user, &s, 1001), "fs gid");
        assert!(decide(&user, &s, 1000), "supplementary group");
        assert!(!decide(&user, &s, 5), "neither");
        let root = Caller {
            uid: 0,
            gid: 0,
            pid: 1,
        };
        let full = parse_status("CapEff:\t000001ffffffffff\n");
        let no_fsetid = parse_status("CapEff:\t000001ffffffffef\n");
        assert!(decide(&root, &full, 5));
        assert!(!decide(&root, &no_fsetid, 5), "root without CAP_FSETID");
        assert!(decide(&root, &Status::default(), 5), "unknown: root's");
        assert!(!decide(&user, &Status::default(), 5));
    }
}
