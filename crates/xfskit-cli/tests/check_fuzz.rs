//! `xfskit check` against `xfs_repair -n` on a deterministic sample of the
//! fuzz corpus (scripts/fuzz_corpus.sh: kernel-made images, one field of
//! one structure changed by `xfs_db fuzz` per case, every structure and
//! verb represented). For every case: check flags it whenever xfs_repair -n
//! does and names where, exits 0 or 1 (never a panic), finishes in time and
//! in bounded memory; `extract` and `bulkstat` end with a clean exit code.
//! The whole corpus is run by hand with scripts/fuzz_run.sh.

mod common;

use common::{missing_tool, require_root, skip, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every how many corpus cases one is run (about 690 of the 41,000 the
/// six images give with xfsprogs 6.15 beside the project, 420 without).
const EVERY: usize = 60;
/// Longest a check of one of these 40 MiB images may take, in seconds.
const MAX_CHECK_SECONDS: f64 = 20.0;
/// Largest peak RSS of one check, in KiB.
const MAX_CHECK_RSS_KIB: u64 = 512 * 1024;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One line of results.tsv (see scripts/fuzz_run.sh).
#[derive(Debug)]
struct Case {
    line: String,
    feature: String,
    structure: String,
    repair: String,
    check: i32,
    named: bool,
    seconds: f64,
    rss_kib: u64,
    extract: i32,
    bulkstat: i32,
}

fn parse(line: &str) -> Case {
    let f: Vec<&str> = line.split('\t').collect();
    assert!(f.len() >= 12, "short results line: {line}");
    let num = |s: &str| s.parse::<i32>().unwrap_or(-1);
    Case {
        line: line.to_owned(),
        feature: f[1].to_owned(),
        structure: f[2].to_owned(),
        repair: f[5].to_owned(),
        check: num(f[6]),
        named: f[7] == "1",
        seconds: f[8].parse().unwrap_or(0.0),
        rss_kib: f[9].parse().unwrap_or(0),
        extract: num(f[10]),
        bulkstat: num(f[11]),
    }
}

#[test]
fn check_agrees_with_xfs_repair_on_fuzzed_images() {
    let test = "check_agrees_with_xfs_repair_on_fuzzed_images";
    if !require_root(test) {
        return;
    }
    if let Some(t) = missing_tool(&[
        "mkfs.xfs",
        "xfs_db",
        "xfs_repair",
        "setfattr",
        "/usr/bin/time",
    ]) {
        skip(test, &format!("{t} is not installed"));
        return;
    }
    let dir = TempDir::new("xfskit-check-fuzz");
    let out = dir.path();
    let status = Command::new("bash")
        .arg(repo().join("scripts/fuzz_corpus.sh"))
        .arg(out)
        .status()
        .expect("run fuzz_corpus.sh");
    assert!(status.success(), "fuzz_corpus.sh failed");
    let run = Command::new("bash")
        .arg(repo().join("scripts/fuzz_run.sh"))
        .arg(out)
        .arg(EVERY.to_string())
        .env("XFSKIT", env!("CARGO_BIN_EXE_xfskit"))
        .output()
        .expect("run fuzz_run.sh");
    let table = String::from_utf8_lossy(&run.stdout);
    println!("{table}");
    assert!(
        run.status.success(),
        "fuzz_run.sh failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let results = std::fs::read_to_string(out.join("results.tsv")).expect("results.tsv");
    let cases: Vec<Case> = results.lines().map(parse).collect();
    let run_cases: Vec<&Case> = cases.iter().filter(|c| c.repair != "F").collect();
    assert!(run_cases.len() > 350, "only {} cases ran", run_cases.len());

    // Every structure of the corpus is in the sample.
    let structs: std::collections::BTreeSet<&str> = run_cases
        .iter()
        .map(|c| c.structure.split(':').next().unwrap_or(""))
        .collect();
    for s in [
        "sb0",
        "sb1",
        "agf",
        "agi",
        "agfl",
        "bnobt",
        "cntbt",
        "inobt",
        "finobt",
        "refcountbt",
        "rmapbt",
        "inode",
        "bmbt-leaf",
        "dir-block",
        "dir-leaf",
        "dir-node",
        "dir-free",
        "attr-leaf",
        "attr-node",
        "attr-remote",
        "symlink-remote",
    ] {
        assert!(structs.contains(s), "no case of {s} in the sample");
    }

    // With xfsprogs 6.15 beside the project the metadata directory image
    // is in the corpus, its tree's inodes too.
    if common::fixtures::xfsprogs_615().is_some() {
        let metadir: Vec<&&Case> = run_cases
            .iter()
            .filter(|c| c.feature == "metadir")
            .collect();
        assert!(
            metadir.len() > 100,
            "only {} metadir cases ran",
            metadir.len()
        );
        assert!(
            metadir
                .iter()
                .any(|c| c.structure.starts_with("inode:metadir")
                    || c.structure.starts_with("inode:rtgroups")),
            "no case of the metadata directory tree's inodes in the sample"
        );
    }

    let mut failures = Vec::new();
    for c in &run_cases {
        // A primary superblock of another version or with unknown
        // incompatible features is reported as unsupported (exit 3).
        let unsupported = c.check == 3 && c.structure == "sb0";
        let flagged = c.check == 1 || unsupported;
        if !(c.check == 0 || flagged) {
            failures.push(format!(
                "check exit {} (0 or 1 expected): {}",
                c.check, c.line
            ));
        }
        if c.repair == "1" && !flagged {
            failures.push(format!("missed (xfs_repair -n flags it): {}", c.line));
        }
        // A wrong inode number in a directory entry shows as the link
        // counts of the inodes it moved a link between: those are named.
        let by_links = c.line.contains("nlink") || c.line.contains("not in any directory");
        if flagged && !c.named && !by_links {
            failures.push(format!(
                "report does not name the fuzzed structure: {}",
                c.line
            ));
        }
        if c.seconds > MAX_CHECK_SECONDS {
            failures.push(format!("check took {}s: {}", c.seconds, c.line));
        }
        if c.rss_kib > MAX_CHECK_RSS_KIB {
            failures.push(format!("check used {} KiB: {}", c.rss_kib, c.line));
        }
        for (cmd, code) in [("extract", c.extract), ("bulkstat", c.bulkstat)] {
            // 6: extract went on past entries the destination refused.
            if ![0, 1, 3, 4, 5, 6].contains(&code) {
                failures.push(format!("{cmd} exit {code} (a panic or a hang): {}", c.line));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        run_cases.len(),
        failures.join("\n")
    );
}
