//! Disk images made with the real tools (sgdisk, sfdisk, qemu-img, mkfs.xfs)
//! for the disk tests, and `xfskit` runs with a time limit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a bash script (with `set -euo pipefail`); panics with its output
/// when it fails.
pub fn sh(script: &str) -> String {
    let out = Command::new("bash")
        .args(["-c", &format!("set -euo pipefail\n{script}")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
    assert!(
        out.status.success(),
        "script failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Start and size in bytes of partition `n` of `disk`, as `partx` reads it.
pub fn partx_range(disk: &Path, n: u32) -> (u64, u64) {
    let out = sh(&format!(
        "partx -g -b -o START,SIZE -n {n} '{}'",
        disk.display()
    ));
    let v: Vec<u64> = out
        .split_whitespace()
        .map(|w| w.parse().expect("partx prints numbers"))
        .collect();
    assert_eq!(v.len(), 2, "partx output: {out}");
    (v[0] * 512, v[1])
}

/// The result of one `xfskit` run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `xfskit ARGS`; panics when it runs longer than `limit` (a hang) or
/// is killed by a signal (a panic aborts, an overflow traps).
pub fn xfskit(args: &[&str], limit: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xfskit");
    // Drain the pipes on threads so that a large output cannot block it.
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut so, &mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut se, &mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("xfskit {args:?} ran longer than {limit:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    let Some(code) = status.code() else {
        panic!("xfskit {args:?} was killed by a signal ({status}); stderr:\n{stderr}");
    };
    assert!(
        !stderr.contains("panicked"),
        "xfskit {args:?} panicked:\n{stderr}"
    );
    Run {
        code,
        stdout,
        stderr,
    }
}

/// LVM commands without device-mapper (this kernel has none): metadata
/// only, no activation, no udev.
pub const LVM: &str = "LVM_SUPPRESS_FD_WARNINGS=1 DM_DISABLE_UDEV=1";
pub const LVM_CONF: &str = "--driverloaded n --config 'activation{udev_sync=0 udev_rules=0} devices{obtain_device_list_from_udev=0} backup{backup=0 archive=0}'";

/// Makes a PV on device `d`, a volume group `vg` on it (4 MiB extents)
/// and, in order, the volumes `lvs` as (name, lvcreate -L size), metadata
/// only (not activated, not zeroed).
pub fn lvm_make(d: &str, vg: &str, lvs: &[(&str, &str)]) {
    let mut script = format!(
        "export {LVM}\npvcreate -q {LVM_CONF} {d}\nvgcreate -q {LVM_CONF} -s 4M {vg} {d}\n"
    );
    for (name, size) in lvs {
        script.push_str(&format!(
            "lvcreate -q {LVM_CONF} -an -Zn -y -n {name} -L {size} {vg}\n"
        ));
    }
    sh(&script);
}

/// What the lvm2 tools say of volume `vg`/`lv` on the PV device `d`:
/// (the PV's first extent in bytes, the extent size in bytes, and per
/// segment (first extent in the volume, extents, first extent on the PV)).
pub fn lvm_layout(d: &str, vg: &str, lv: &str) -> (u64, u64, Vec<(u64, u64, u64)>) {
    let q = |what: &str| sh(&format!("export {LVM}; {what} 2>/dev/null"));
    let pe_start: u64 = q(&format!(
        "pvs {LVM_CONF} --noheadings --units b --nosuffix -o pe_start {d}"
    ))
    .trim()
    .parse()
    .expect("pe_start");
    let ext: u64 = q(&format!(
        "vgs {LVM_CONF} --noheadings --units b --nosuffix -o vg_extent_size {vg}"
    ))
    .trim()
    .parse()
    .expect("extent size");
    let segs = q(&format!(
        "lvs {LVM_CONF} --segments --noheadings -o seg_start_pe,seg_size_pe,seg_pe_ranges {vg}/{lv}"
    ))
    .lines()
    .map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let first = w[2]
            .rsplit(':')
            .next()
            .and_then(|r| r.split('-').next())
            .expect("range");
        (
            w[0].parse().expect("start"),
            w[1].parse().expect("size"),
            first.parse().expect("pe"),
        )
    })
    .collect();
    (pe_start, ext, segs)
}

/// A loop device over a byte range of a file; detached on drop.
pub struct LoopRange {
    pub dev: String,
}

impl LoopRange {
    pub fn new(file: &Path, start: u64, size: u64) -> LoopRange {
        let dev = sh(&format!(
            "losetup -f --show -o {start} --sizelimit {size} '{}'",
            file.display()
        ))
        .trim()
        .to_string();
        LoopRange { dev }
    }
}

impl Drop for LoopRange {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A kernel mount of a block device; unmounted on drop.
pub struct DevMount {
    pub dir: std::path::PathBuf,
}

impl DevMount {
    pub fn new(dev: &str, dir: &Path, read_only: bool) -> DevMount {
        std::fs::create_dir_all(dir).expect("mkdir mountpoint");
        let opts = if read_only { "ro,nouuid" } else { "nouuid" };
        sh(&format!("mount -t xfs -o {opts} {dev} '{}'", dir.display()));
        DevMount {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for DevMount {
    fn drop(&mut self) {
        let ok = super::umount_retrying(&self.dir);
        if !ok {
            eprintln!("warning: umount {} failed", self.dir.display());
        }
    }
}

/// A sparse file of `bytes`.
pub fn sparse_file(path: &Path, bytes: u64) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(bytes))
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
}
