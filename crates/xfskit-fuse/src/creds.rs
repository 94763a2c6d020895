//! Who sent a request, as far as a rule needs more than the uid: a FUSE
//! request carries the caller's fs uid, fs gid and thread id, but not its
//! supplementary groups or capabilities, which /proc/<tid>/status shows
//! (the thread's own credentials, "Groups:" and "CapEff:").
//!
//! Used where the kernel leaves a decision to the server: setting an
//! access ACL clears set-group-id unless the caller is in the file's group
//! or has CAP_FSETID (the kernel would say so with
//! `FUSE_SETXATTR_ACL_KILL_SGID`, but only with `FUSE_SETXATTR_EXT`, a
//! request layout fuser 0.18 does not parse).

use crate::names::Caller;

/// CAP_FSETID's bit in a capability set.
const CAP_FSETID: u64 = 1 << 4;

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
        let status = (self.pid != 0)
            .then(|| std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok())
            .flatten()
            .map(|t| parse_status(&t))
            .unwrap_or_default();
        decide(self, &status, gid)
    }
}

fn decide(c: &Caller, s: &Status, gid: u32) -> bool {
    let capable = match s.cap_eff {
        Some(caps) => caps & CAP_FSETID != 0,
        None => c.uid == 0,
    };
    c.gid == gid || capable || s.groups.contains(&gid)
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
