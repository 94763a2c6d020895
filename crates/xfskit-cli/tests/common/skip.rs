//! Skipped tests: a test that cannot run here says why and is not counted
//! as passed. `scripts/test.sh` sets `XFSKIT_SKIP_LOG` to a file where each
//! skip adds a line, and subtracts them from the passed tests it reports.

use std::io::Write;

/// Prints `SKIP test: why` and records it in `$XFSKIT_SKIP_LOG`.
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

/// The first of `tools` not found on PATH, if any.
pub fn missing_tool(tools: &[&str]) -> Option<String> {
    tools
        .iter()
        .find(|t| {
            !std::process::Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|t| t.to_string())
}
