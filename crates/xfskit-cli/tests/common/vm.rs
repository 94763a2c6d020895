//! A Linux kernel with XFS quota support, booted under QEMU for a script.
//!
//! The machine's own kernel is built without CONFIG_XFS_QUOTA; Debian's
//! kernel package has it. `Vm::find` picks an installed kernel whose
//! config has it and whose modules are plain `.ko` files; `Vm::run`
//! boots it (KVM is not used: TCG boots in seconds and does not depend on
//! the host's virtualisation) with a busybox initramfs holding the XFS
//! and virtio modules and the host's xfs_io and xfs_quota with their
//! libraries, the images given as /dev/vda, /dev/vdb, ..., runs the
//! shell script and powers off. The script's output is returned; a
//! script that fails, or a boot that never reaches it, fails the test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A bootable kernel and what its initramfs needs.
pub struct Vm {
    kernel: PathBuf,
    /// Modules in load order.
    modules: Vec<PathBuf>,
}

const START: &str = "XFSKIT-VM-START";
const RC: &str = "XFSKIT-VM-RC=";

fn ok(c: &mut Command) -> bool {
    c.output().is_ok_and(|o| o.status.success())
}

impl Vm {
    /// The kernel to boot, or why there is none.
    pub fn find() -> Result<Vm, String> {
        for t in [
            "qemu-system-x86_64",
            "busybox",
            "cpio",
            "gzip",
            "xfs_io",
            "xfs_quota",
        ] {
            if !ok(Command::new("sh").args(["-c", &format!("command -v {t}")])) {
                return Err(format!("{t} is not installed"));
            }
        }
        let mut kernels: Vec<PathBuf> = std::fs::read_dir("/boot")
            .map_err(|e| format!("/boot: {e}"))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("vmlinuz-"))
            })
            .collect();
        kernels.sort();
        for k in kernels.iter().rev() {
            let ver = k.file_name().unwrap().to_str().unwrap()["vmlinuz-".len()..].to_string();
            let config = std::fs::read_to_string(format!("/boot/config-{ver}")).unwrap_or_default();
            if !config.lines().any(|l| l == "CONFIG_XFS_QUOTA=y") {
                continue;
            }
            if let Some(modules) = modules_for(&ver) {
                return Ok(Vm {
                    kernel: k.clone(),
                    modules,
                });
            }
        }
        Err(
            "no kernel in /boot with CONFIG_XFS_QUOTA=y and plain .ko modules \
             (Debian's linux-image-amd64 has them)"
                .into(),
        )
    }

    /// Boots the kernel with `images` as virtio disks and runs `script`
    /// (a busybox sh script; /mnt exists). Returns what it printed.
    pub fn run(&self, images: &[&Path], script: &str) -> String {
        let dir = super::TempDir::new("vm");
        let root = dir.path().join("root");
        for d in ["bin", "mods", "proc", "sys", "dev", "mnt", "tmp"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for tool in ["busybox", "xfs_io", "xfs_quota"] {
            let path = String::from_utf8(
                Command::new("sh")
                    .args(["-c", &format!("command -v {tool}")])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap();
            copy_with_libs(Path::new(path.trim()), &root);
        }
        let mut names = Vec::new();
        for m in &self.modules {
            let n = m.file_name().unwrap();
            std::fs::copy(m, root.join("mods").join(n)).unwrap();
            names.push(n.to_str().unwrap().to_string());
        }
        let init = format!(
            "#!/bin/busybox sh\n\
             /bin/busybox --install -s /bin\n\
             export PATH=/bin\n\
             mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev\n\
             for m in {}; do insmod /mods/$m || echo \"insmod $m failed\"; done\n\
             echo {START}\n\
             sh -e /script; echo \"{RC}$?\"\n\
             sync\n\
             poweroff -f\n",
            names.join(" ")
        );
        std::fs::write(root.join("init"), init).unwrap();
        std::fs::write(root.join("script"), script).unwrap();
        Command::new("chmod")
            .args(["+x"])
            .arg(root.join("init"))
            .status()
            .unwrap();
        let initrd = dir.path().join("initrd.gz");
        let packed = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "cd '{}' && find . | cpio -o -H newc 2>/dev/null | gzip -1 > '{}'",
                root.display(),
                initrd.display()
            ))
            .status()
            .unwrap();
        assert!(packed.success(), "packing the initramfs failed");
        let mut qemu = Command::new("qemu-system-x86_64");
        qemu.args([
            "-accel",
            "tcg",
            "-m",
            "768",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(&self.kernel)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyS0 quiet panic=-1 rdinit=/init"]);
        for img in images {
            qemu.arg("-drive")
                .arg(format!("file={},format=raw,if=virtio", img.display()));
        }
        let o = Command::new("timeout")
            .arg("600")
            .args(qemu.get_program().to_str())
            .args(qemu.get_args())
            .output()
            .expect("qemu-system-x86_64");
        let out = String::from_utf8_lossy(&o.stdout).replace('\r', "");
        let Some(start) = out.find(START) else {
            panic!(
                "the VM never reached the script (exit {:?}):\n{out}\n{}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            );
        };
        let body = &out[start + START.len()..];
        let rc = body
            .find(RC)
            .map(|i| body[i + RC.len()..].split_whitespace().next().unwrap_or(""));
        assert_eq!(rc, Some("0"), "the VM's script failed:\n{body}");
        body[..body.find(RC).unwrap()].trim_start().to_string()
    }
}

/// The modules that give virtio disks and XFS under kernel `ver`, in an
/// order that loads (dependencies first); None when one is missing or
/// not a plain `.ko`. Built-in ones are left out.
fn modules_for(ver: &str) -> Option<Vec<PathBuf>> {
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for m in ["crc32c_generic", "virtio_pci", "virtio_blk", "xfs"] {
        add_module(ver, m, &mut order, &mut seen)?;
    }
    Some(order)
}

fn add_module(
    ver: &str,
    m: &str,
    order: &mut Vec<PathBuf>,
    seen: &mut BTreeSet<String>,
) -> Option<()> {
    if !seen.insert(m.to_string()) {
        return Some(());
    }
    let info = |field: &str| {
        Command::new("modinfo")
            .args(["-k", ver, "-F", field, m])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(path) = info("filename") else {
        // Not a module of this kernel: built in, or absent (then the boot
        // fails and says so).
        return Some(());
    };
    if path == "(builtin)" {
        return Some(());
    }
    if !path.ends_with(".ko") {
        return None;
    }
    for d in info("depends")
        .unwrap_or_default()
        .split(',')
        .filter(|d| !d.is_empty())
    {
        add_module(ver, d, order, seen)?;
    }
    order.push(PathBuf::from(path));
    Some(())
}

/// Copies `bin` into `root`/bin and the libraries it loads to their own
/// paths under `root`.
fn copy_with_libs(bin: &Path, root: &Path) {
    std::fs::copy(bin, root.join("bin").join(bin.file_name().unwrap())).unwrap();
    let ldd = Command::new("ldd").arg(bin).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let Some(lib) = line.split_whitespace().find(|w| w.starts_with('/')) else {
            continue;
        };
        let dest = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let real = std::fs::canonicalize(lib).unwrap();
        std::fs::copy(real, dest).unwrap();
    }
}
