//! The writeback limits of the mount's backing device (its "bdi").
//!
//! The kernel gives every FUSE mount a bdi that may hold at most 1% of the
//! machine's dirty page limit, enforced strictly (`strict_limit`), because
//! an unprivileged server could otherwise pin the page cache. With the
//! writeback cache on, that 1% is what random writes run into: the writer
//! is throttled to the speed of single-page WRITEs long before the kernel
//! would throttle a disk filesystem. A server started by root may raise it,
//! as any root user may through sysfs; this does that after the mount
//! exists and before the first request, and only warns when it cannot
//! (not root, no sysfs).

use std::io;
use std::path::Path;

/// The `major:minor` of the filesystem mounted at `mountpoint`, read from
/// /proc/self/mountinfo (a stat of the mountpoint would wait on our own
/// server, which is not serving yet). The last matching line wins: it is
/// the mount on top.
fn device_of(mountpoint: &Path) -> io::Result<String> {
    let want = std::fs::canonicalize(mountpoint)?;
    let want = want.to_string_lossy();
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            // mount id, parent id, major:minor, root, mount point, ...
            (f.len() > 4 && unescape(f[4]) == want).then(|| f[2].to_string())
        })
        .next_back()
        .ok_or_else(|| io::Error::other(format!("{want} is not in /proc/self/mountinfo")))
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Lets the mount at `mountpoint` hold `percent` of the dirty page limit,
/// not strictly (throttled like a disk filesystem once the machine's own
/// limits are reached). Returns the bdi's sysfs directory.
pub(crate) fn raise_dirty_limit(mountpoint: &Path, percent: u8) -> io::Result<String> {
    let dir = format!("/sys/class/bdi/{}", device_of(mountpoint)?);
    std::fs::write(format!("{dir}/max_ratio"), percent.min(100).to_string())?;
    // Older kernels have no strict_limit file; the ratio alone still helps.
    match std::fs::write(format!("{dir}/strict_limit"), "0") {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/x\134y"), r"/x\y");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }
}
