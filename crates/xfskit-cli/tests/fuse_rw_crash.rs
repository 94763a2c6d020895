//! The crash test: a read-write `xfskit mount` killed with SIGKILL at a
//! random moment of a write-heavy workload, many times. Each round runs on
//! a fresh image: writers create files of random sizes (some fsynced, then
//! never touched again), append to a log file with an fsync every few
//! appends, write big files, rename and unlink, while the test kills the
//! server after a random delay. Then two copies of the killed image are
//! replayed, one by the kernel (a loop mount) and one by `xfskit recover`;
//! each must be `xfs_repair -n` clean afterwards and show every fsynced
//! file whole and the log file at least as long as its last fsync left it,
//! with the bytes written.
//!
//! `XFSKIT_SEED` picks other delays and sizes, `XFSKIT_CRASH_ROUNDS` the
//! number of rounds (default 8). Needs root, /dev/fuse and xfsprogs;
//! prints SKIP otherwise.

mod common;

use common::repair_check;
use common::rwmount::{skip_rw, RwMount};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The bytes of file `id`, `len` long: each file's own pattern.
fn contents(id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64 / 7).wrapping_mul(31) ^ id.wrapping_mul(0x9e37)) as u8)
        .collect()
}

/// What survived must be: fsynced files by name, id and length, and the
/// log file's length at its last fsync.
#[derive(Default)]
struct Durable {
    files: Vec<(String, u64, usize)>,
    log_len: usize,
}

/// Writes until an operation fails (the server is gone), recording in
/// `durable` what fsync made durable.
fn workload(mnt: &Path, seed: u64, durable: &Mutex<Durable>) {
    let mut r = Rng(seed | 1);
    let mut run = || -> std::io::Result<()> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(mnt.join("log"))?;
        let mut log_len = 0usize;
        for i in 0u64.. {
            let dir = mnt.join(format!("d{}", i / 64));
            if i % 64 == 0 {
                fs::create_dir(&dir)?;
            }
            let len = match r.below(10) {
                0 => (r.below(8) as usize + 1) << 20,
                1..=4 => r.below(200_000) as usize,
                _ => r.below(9000) as usize,
            };
            let name = dir.join(format!("f{i}"));
            let mut f = fs::File::create(&name)?;
            f.write_all(&contents(i, len))?;
            if i % 3 == 0 {
                f.sync_all()?;
                let rel = name
                    .strip_prefix(mnt)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                durable.lock().unwrap().files.push((rel, i, len));
            } else if i % 3 == 1 && i > 2 {
                // Churn among the files never fsynced.
                let old = mnt.join(format!("d{}/f{}", (i - 3) / 64, i - 3));
                if r.below(2) == 0 {
                    fs::rename(&old, dir.join(format!("moved{i}")))?;
                } else {
                    fs::remove_file(&old)?;
                }
            }
            let chunk = contents(u64::MAX, 4096 + r.below(60_000) as usize);
            let at = log_len;
            log.write_all(&shifted(&chunk, at))?;
            log_len += chunk.len();
            if i % 4 == 3 {
                log.sync_all()?;
                durable.lock().unwrap().log_len = log_len;
            }
        }
        Ok(())
    };
    let _ = run();
}

/// The log file's bytes at offset `at` onwards are those of one long
/// pattern: `chunk` shifted to start there.
fn shifted(chunk: &[u8], at: usize) -> Vec<u8> {
    (0..chunk.len()).map(|i| log_byte(at + i)).collect()
}

fn log_byte(pos: usize) -> u8 {
    (pos as u64).wrapping_mul(0x2545_f491).rotate_right(13) as u8
}

/// Checks the replayed filesystem at `root` against `d`; the errors found.
fn check_tree(root: &Path, d: &Durable, what: &str) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, id, len) in &d.files {
        match fs::read(root.join(rel)) {
            Ok(b) if b.len() == *len && b == contents(*id, *len) => {}
            Ok(b) => bad.push(format!("{what}: {rel}: {} bytes, not its {len}", b.len())),
            Err(e) => bad.push(format!("{what}: {rel}: {e}")),
        }
    }
    match fs::read(root.join("log")) {
        Ok(b) if b.len() >= d.log_len => {
            if let Some(p) = (0..b.len()).find(|&i| b[i] != log_byte(i)) {
                if p < d.log_len {
                    bad.push(format!("{what}: log differs at byte {p}"));
                }
            }
        }
        Ok(b) => bad.push(format!(
            "{what}: log has {} bytes, {} were fsynced",
            b.len(),
            d.log_len
        )),
        Err(e) if d.log_len == 0 => {
            let _ = e;
        }
        Err(e) => bad.push(format!("{what}: log: {e}")),
    }
    bad
}

/// A copy of `image` next to it, holes kept.
fn copy_image(image: &Path, name: &str) -> PathBuf {
    let to = image.with_file_name(name);
    let st = Command::new("cp")
        .args(["--sparse=always"])
        .arg(image)
        .arg(&to)
        .status()
        .unwrap();
    assert!(st.success(), "cp {}", image.display());
    to
}

/// Replays `image` with a kernel mount and checks it; the errors found.
fn kernel_replay(image: &Path, mnt: &Path, d: &Durable) -> Vec<String> {
    fs::create_dir_all(mnt).unwrap();
    let st = Command::new("mount")
        .args(["-o", "loop"])
        .arg(image)
        .arg(mnt)
        .status()
        .unwrap();
    if !st.success() {
        return vec!["the kernel cannot mount the killed image".into()];
    }
    let bad = check_tree(mnt, d, "kernel replay");
    common::must_umount(mnt);
    bad
}

#[test]
fn sigkill_at_random_moments() {
    if skip_rw("sigkill_at_random_moments") {
        return;
    }
    let seed: u64 = std::env::var("XFSKIT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xc0ff_ee17);
    let rounds: u64 = std::env::var("XFSKIT_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    println!("seed {seed}, {rounds} rounds");
    let mut r = Rng(seed | 1);
    let mut failures = Vec::new();
    for round in 0..rounds {
        let mut m = RwMount::new(&format!("crash{round}"), 600, &[]);
        let durable = Arc::new(Mutex::new(Durable::default()));
        let (mnt, d2, s) = (m.mnt.clone(), durable.clone(), r.next());
        let writer = std::thread::spawn(move || workload(&mnt, s, &d2));
        std::thread::sleep(Duration::from_millis(150 + r.below(1800)));
        m.kill();
        writer.join().unwrap();
        let d = std::mem::take(&mut *durable.lock().unwrap());
        println!(
            "round {round}: killed with {} fsynced files, log at {} bytes",
            d.files.len(),
            d.log_len
        );
        // The kernel's replay.
        let kimg = copy_image(&m.image, "kernel.img");
        let mut bad = kernel_replay(&kimg, &m.dir.join("kernel"), &d);
        let (code, out) = repair_check(&kimg);
        if code != 0 {
            bad.push(format!("xfs_repair -n after the kernel's replay:\n{out}"));
        }
        let _ = fs::remove_file(&kimg);
        // xfskit recover's replay, then a kernel mount reads it (the log
        // is clean by then: nothing is replayed twice).
        let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .arg("recover")
            .arg(&m.image)
            .output()
            .unwrap();
        if !out.status.success() {
            bad.push(format!("xfskit recover: {out:?}"));
        } else {
            let (code, rep) = repair_check(&m.image);
            if code != 0 {
                bad.push(format!("xfs_repair -n after xfskit recover:\n{rep}"));
            }
            bad.extend(
                kernel_replay(&m.image, &m.dir.join("kernel"), &d)
                    .into_iter()
                    .map(|e| format!("after xfskit recover, {e}")),
            );
        }
        if !bad.is_empty() {
            // Keep the image to look at (dropping the mount removes it).
            println!("round {round}: kept {}", m.dir.display());
            std::mem::forget(m);
            failures.extend(bad.into_iter().map(|e| format!("round {round}: {e}")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
