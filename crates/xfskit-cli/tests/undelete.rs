//! `xfskit deleted` / `undelete` on a corpus the kernel made and deleted.
//!
//! Each image: files of known content (sha256) in short-form, block, leaf
//! and node directories, a file of many extents (btree format) and a large
//! one, and a subtree removed whole (`rm -r`); the image is unmounted and
//! mounted again (so the inodes are on disk as they were), then a known
//! subset is deleted by the kernel and the image left (a) cleanly
//! unmounted, (b) shut down with the deletions only in the log, or (c)
//! deleted and then partly overwritten by new files. Every deleted file is
//! scored: recovered under its full path with its content, under its name
//! only, data only, with wrong data or a wrong name, or not found. The
//! image must be byte-identical afterwards.

mod common;

use common::disks::sh;
use common::fixtures::{xfskit_output, xfsprogs_72_bin};
use common::{is_root, skip, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum After {
    Clean,
    DirtyLog,
    Overwritten,
}

/// One deleted file as the kernel saw it before the deletion.
struct Gone {
    ino: u64,
    size: u64,
    sha: String,
    path: String,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Score {
    FullPath,
    NameOnly,
    DataOnly,
    WrongData,
    WrongName,
    NotFound,
}

/// Makes the corpus with `mkfs` (a command line) and deletes from it.
fn corpus(dir: &Path, mkfs: &str, after: After) -> (std::path::PathBuf, Vec<Gone>) {
    let img = dir.join("c.img");
    let m = dir.join("m");
    let shutdown = if after == After::DirtyLog {
        "xfs_io -x -c 'shutdown -f' \"$M\""
    } else {
        "true"
    };
    let overwrite = if after == After::Overwritten {
        // New files into the freed space and inodes.
        "mkdir \"$M/new\"; for i in $(seq 1 60); do head -c $((i * 5000)) /dev/urandom > \"$M/new/n$i\"; done"
    } else {
        "true"
    };
    let out = sh(&format!(
        r#"
I='{img}'; M='{m}'
truncate -s 320M "$I"
{mkfs} -q -f "$I" >/dev/null
mkdir -p "$M"; mount -o loop "$I" "$M"
mkdir "$M/sf" "$M/blk" "$M/leaf" "$M/node" "$M/gone" "$M/gone/a" "$M/gone/a/b"
for i in 1 2 3; do echo "short $i" > "$M/sf/s$i"; done
for i in $(seq 1 30); do head -c $((i * 1700 + 5)) /dev/urandom > "$M/blk/file_$i"; done
for i in $(seq 1 250); do head -c $((i * 37 + 1)) /dev/urandom > "$M/leaf/leaf_file_number_$i"; done
for i in $(seq 1 1200); do head -c $((i % 97 + 1)) /dev/urandom > "$M/node/a_rather_longer_name_for_a_node_directory_$i"; done
for i in $(seq 1 40); do echo "kept $i" > "$M/root_file_$i"; done
for i in $(seq 1 40); do head -c $((i * 300)) /dev/urandom > "$M/gone/top_$i"; done
for i in $(seq 1 40); do head -c $((i * 3000)) /dev/urandom > "$M/gone/a/mid_$i"; done
for i in $(seq 1 5); do head -c 9000 /dev/urandom > "$M/gone/a/b/deep$i"; done
head -c 3000000 /dev/urandom > "$M/big"
for k in $(seq 0 39); do dd if=/dev/urandom of="$M/frag" bs=4096 count=1 seek=$((k * 2)) conv=notrunc status=none; done
umount "$M"; mount -o loop "$I" "$M"
list=$(cd "$M" && {{ echo sf/s2; for i in $(seq 3 3 30); do echo blk/file_$i; done;
  for i in $(seq 5 5 250); do echo leaf/leaf_file_number_$i; done;
  for i in $(seq 7 7 1200); do echo node/a_rather_longer_name_for_a_node_directory_$i; done;
  find gone -type f; echo big; echo frag; }})
for f in $list; do echo "$(stat -c '%i %s' "$M/$f") $(sha256sum < "$M/$f" | cut -d' ' -f1) /$f"; done
for f in $list; do rm "$M/$f"; done
rm -r "$M/gone"
{overwrite}
{shutdown}
umount "$M"
"#,
        img = s(&img),
        m = s(&m),
    ));
    let gone = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Gone {
                ino: f[0].parse().unwrap(),
                size: f[1].parse().unwrap(),
                sha: f[2].to_string(),
                path: f[3].to_string(),
            }
        })
        .collect();
    (img, gone)
}

fn sha256_of(p: &Path) -> String {
    sh(&format!("sha256sum < '{}' | cut -d' ' -f1", s(p)))
        .trim()
        .to_string()
}

/// Recovers into a fresh directory and scores every deleted file; also
/// checks that the image did not change.
fn score(dir: &Path, img: &Path, gone: &[Gone]) -> (BTreeMap<String, Score>, Vec<Value>) {
    let before = sha256_of(img);
    let out = dir.join("out");
    let o = xfskit_output(&["undelete", "-q", s(img), s(&out)]);
    assert!(
        o.status.success(),
        "undelete: {}",
        common::output_text_of(&o)
    );
    assert_eq!(sha256_of(img), before, "the image changed");
    let recs: Vec<Value> = std::fs::read_to_string(out.join("deleted.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_ino: BTreeMap<u64, &Value> = recs
        .iter()
        .map(|r| (r["inode"].as_u64().unwrap(), r))
        .collect();
    let mut scores = BTreeMap::new();
    for g in gone {
        let sc = match by_ino.get(&g.ino) {
            None => Score::NotFound,
            Some(r) => {
                let data_ok = r["recovered_to"].as_str().is_some_and(|rel| {
                    let bytes = std::fs::read(out.join(rel)).unwrap();
                    bytes.len() as u64 >= g.size && {
                        let tail = &bytes[g.size as usize..];
                        let h = sh(&format!(
                            "head -c {} '{}' | sha256sum | cut -d' ' -f1",
                            g.size,
                            s(&out.join(rel))
                        ));
                        h.trim() == g.sha && tail.iter().all(|&b| b == 0)
                    }
                });
                let path = r["path"].as_str();
                let name_ok = r["names"].as_array().unwrap().first().is_some_and(|n| {
                    g.path
                        .ends_with(&format!("/{}", n["name"].as_str().unwrap()))
                });
                let conf = r["confidence"].as_str().unwrap();
                if path.is_some_and(|p| p != g.path) {
                    Score::WrongName
                } else if !data_ok {
                    if conf == "reused" {
                        Score::NotFound
                    } else {
                        Score::WrongData
                    }
                } else if path == Some(g.path.as_str()) {
                    Score::FullPath
                } else if name_ok {
                    Score::NameOnly
                } else if r["names"].as_array().unwrap().is_empty() {
                    Score::DataOnly
                } else {
                    Score::WrongName
                }
            }
        };
        scores.insert(g.path.clone(), sc);
    }
    (scores, recs)
}

/// Counts of each score among the paths under `prefix`.
fn tally(scores: &BTreeMap<String, Score>, prefix: &str) -> BTreeMap<Score, usize> {
    let mut t = BTreeMap::new();
    for (p, sc) in scores {
        if p.starts_with(prefix) {
            *t.entry(*sc).or_default() += 1;
        }
    }
    t
}

/// The corpus through undelete, with the bar the issue sets.
fn run(mkfs: &str, after: After, pptr: bool) {
    let dir = TempDir::new("undelete");
    let (img, gone) = corpus(dir.path(), mkfs, after);
    assert!(
        gone.len() > 200,
        "the corpus lists {} deletions",
        gone.len()
    );
    let (scores, recs) = score(dir.path(), &img, &gone);
    // The timeline lists the same deleted files, marked as fls marks them,
    // in a body file mactime takes.
    let o = xfskit_output(&["timeline", "--deleted", s(&img)]);
    assert!(
        o.status.success(),
        "timeline: {}",
        common::output_text_of(&o)
    );
    let body = String::from_utf8_lossy(&o.stdout).into_owned();
    for (p, sc) in &scores {
        if *sc == Score::FullPath {
            assert!(
                body.contains(&format!("|{p} (deleted)|")),
                "{p} is not in the timeline as deleted"
            );
        }
    }
    if common::missing_tool(&["mactime"]).is_none() {
        let f = dir.path().join("body.txt");
        std::fs::write(&f, &body).unwrap();
        let t = sh(&format!("mactime -b '{}' -d -y", s(&f)));
        assert!(
            t.lines().filter(|l| l.contains(" (deleted)")).count() >= gone.len(),
            "mactime lists fewer deleted names than were deleted"
        );
    }
    for prefix in [
        "/sf",
        "/blk",
        "/leaf",
        "/node",
        "/gone/top",
        "/gone/a/mid",
        "/gone/a/b",
        "/big",
        "/frag",
    ] {
        println!("{mkfs} {after:?} {prefix}: {:?}", tally(&scores, prefix));
    }
    // Nothing is reported with a confidence it does not have.
    let bad: Vec<_> = scores
        .iter()
        .filter(|(_, s)| matches!(s, Score::WrongData | Score::WrongName))
        .collect();
    assert!(bad.is_empty(), "wrong data or names: {bad:?}");
    if after == After::Overwritten {
        return;
    }
    // Block, leaf and node directories (those of the removed subtree
    // too): 90% back under their full paths.
    for prefix in ["/blk", "/leaf", "/node", "/gone/top", "/gone/a/mid"] {
        let t = tally(&scores, prefix);
        let all: usize = t.values().sum();
        let full = t.get(&Score::FullPath).copied().unwrap_or(0);
        assert!(
            full * 10 >= all * 9,
            "{prefix}: {full} of {all} under their full path ({t:?})"
        );
    }
    // The large and the many-extent files come back whole.
    for p in ["/big", "/frag"] {
        let sc = scores[p];
        assert!(
            matches!(sc, Score::FullPath | Score::DataOnly | Score::NameOnly),
            "{p}: {sc:?}"
        );
        // The root is a block directory: its removed entries name them.
        assert_eq!(sc, Score::FullPath, "{p}");
    }
    // Short-form directories keep no removed entry: the parent pointer
    // names them where there is one, and the log's items of the
    // directory (its creation is still in the log) everywhere.
    for (p, sc) in &scores {
        if p.starts_with("/sf/") || p.starts_with("/gone/a/b/") {
            assert_eq!(*sc, Score::FullPath, "{p} (parent pointers: {pptr})");
        }
    }
    // Freeing resets the size; the log's item of the unlink still has it.
    let by_ino: BTreeMap<u64, &Value> = recs
        .iter()
        .map(|r| (r["inode"].as_u64().unwrap(), r))
        .collect();
    for g in &gone {
        if scores[&g.path] == Score::FullPath {
            assert_eq!(
                by_ino[&g.ino]["size"].as_u64(),
                Some(g.size),
                "{}: the size",
                g.path
            );
        }
    }
}

fn mkfs_72() -> Option<String> {
    xfsprogs_72_bin().map(|b| b.join("mkfs.xfs").display().to_string())
}

fn ready(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root for the kernel's loop mount");
        return false;
    }
    true
}

#[test]
fn deleted_after_a_clean_unmount() {
    if !ready("deleted_after_a_clean_unmount") {
        return;
    }
    // Debian's mkfs.xfs 6.1: no parent pointers.
    run("/usr/sbin/mkfs.xfs", After::Clean, false);
    match mkfs_72() {
        Some(m) => {
            run(&m, After::Clean, true);
            run(&format!("{m} -b size=1024"), After::Clean, true);
        }
        None => skip(
            "deleted_after_a_clean_unmount",
            "xfsprogs 7.2 not beside the project",
        ),
    }
}

#[test]
fn deleted_with_the_deletions_only_in_the_log() {
    if !ready("deleted_with_the_deletions_only_in_the_log") {
        return;
    }
    run("/usr/sbin/mkfs.xfs", After::DirtyLog, false);
    if let Some(m) = mkfs_72() {
        run(&m, After::DirtyLog, true);
    }
}

#[test]
fn deleted_then_partly_overwritten() {
    if !ready("deleted_then_partly_overwritten") {
        return;
    }
    match mkfs_72() {
        Some(m) => run(&m, After::Overwritten, true),
        None => run("/usr/sbin/mkfs.xfs", After::Overwritten, false),
    }
}
