//! Skipped tests: a test that cannot run here says why and is not counted
//! as passed. `scripts/test.sh` sets `XFSKIT_SKIP_LOG` to a file where each
//! skip adds a line, and subtracts them from the passed tests it reports.

use std::io::Write;
use std::process::Command;

/// Prints `SKIP test: why` (on stdout and stderr) and adds that line to
/// the file `$XFSKIT_SKIP_LOG` names, if it is set.
pub fn skip(test: &str, why: &str) {
    let line = format!("SKIP {test}: {why}");
    println!("{line}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("XFSKIT_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// True when running as root.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// True when `tool` is found on PATH.
pub fn have_tool(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The first of `tools` not found on PATH, if any.
pub fn missing_tool(tools: &[&str]) -> Option<String> {
    tools.iter().find(|t| !have_tool(t)).map(|t| t.to_string())
}

/// True when test `test` can loop-mount an XFS image made by mkfs.xfs
/// (root, mkfs.xfs installed); otherwise skips it (see [`skip`]).
pub fn can_mount(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root to loop-mount an XFS image");
        return false;
    }
    if Command::new("mkfs.xfs").arg("-V").output().is_err() {
        skip(test, "mkfs.xfs is not installed");
        return false;
    }
    true
}
