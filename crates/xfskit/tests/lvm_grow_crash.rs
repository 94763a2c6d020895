//! Crash safety of growing an LVM2 volume (`disk::lvm::grow::extend`),
//! proven by crashing: a PV made by the lvm2 tools on a file (through a
//! loop device), the file then made larger, and the grow run on a device
//! that stops accepting writes after its N-th write (or tears that
//! write), for every N it issues. After each crash the volume group's
//! metadata reads back whole, with the volume at its old size or its new
//! one; the same grow run again gives the new size, and the lvm2 tools
//! (vgck, lvs) read the result.

mod crash_common;
mod write_common;

use crash_common::CrashDevice;
use write_common::*;
use xfskit::disk::lvm;

const LVM: &str = "LVM_SUPPRESS_FD_WARNINGS=1 DM_DISABLE_UDEV=1";
const LVM_CONF: &str = "--driverloaded n --config 'activation{udev_sync=0 udev_rules=0} devices{obtain_device_list_from_udev=0} backup{backup=0 archive=0}'";

fn sh(script: &str) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("set -euo pipefail\n{script}")])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{script}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The size of volume `lv` as the metadata on `dev` says.
fn lv_size(dev: &dyn xfskit::dev::Device, lv: &str) -> Result<u64, String> {
    let pv = lvm::read_pv(dev)?.ok_or("no PV label")?;
    let v = lvm::volumes(&pv)?;
    v.iter()
        .find(|v| v.name == lv)
        .map(|v| v.size_bytes)
        .ok_or_else(|| format!("no volume {lv}"))
}

#[test]
fn lvm_grow_survives_a_crash_at_every_write() {
    let test = "lvm_grow_survives_a_crash_at_every_write";
    if skip_unless_root(test) {
        return;
    }
    if std::process::Command::new("pvcreate")
        .arg("--version")
        .output()
        .is_err()
    {
        xfskit_testkit::skip(test, "pvcreate (lvm2) is not installed");
        return;
    }
    let dir = Scratch::new("lvm-grow-crash");
    let img = dir.0.join("pv");
    let vg = format!("xfskit_crash_{}", std::process::id());
    sh(&format!(
        "truncate -s 200M {i}; lo=$(losetup -f --show {i}); export {LVM}; \
         {{ pvcreate -q {LVM_CONF} $lo && vgcreate -q {LVM_CONF} -s 4M {vg} $lo && \
            lvcreate -q {LVM_CONF} -an -Zn -y -n a -L 40M {vg} && \
            lvcreate -q {LVM_CONF} -an -Zn -y -n b -L 8M {vg}; }} >/dev/null 2>&1; \
         r=$?; losetup -d $lo; exit $r",
        i = img.display()
    ));
    sh(&format!("truncate -s 400M {}", img.display()));
    let old = 40u64 << 20;
    // The full run, for the number of writes and the final size.
    let full = CrashDevice::new(&img, None, false);
    let new = lvm::grow::extend(&full, &vg, "a", None).expect("grow");
    assert!(new > 300 << 20, "grown to {new}");
    let writes = full.writes();
    assert!(writes >= 3, "{writes} writes (text, label, area header)");
    for tear in [false, true] {
        for n in 1..=writes {
            let dev = CrashDevice::new(&img, Some(n), tear);
            assert!(
                lvm::grow::extend(&dev, &vg, "a", None).is_err(),
                "write {n} of {writes} did not fail"
            );
            dev.revive();
            let after = lv_size(&dev, "a").unwrap_or_else(|e| panic!("crash at write {n}: {e}"));
            assert!(
                after == old || after == new,
                "crash at write {n} (torn: {tear}): {after} bytes"
            );
            assert_eq!(
                lvm::grow::extend(&dev, &vg, "a", None).expect("grow again"),
                new,
                "the grow run again after a crash at write {n}"
            );
            assert_eq!(lv_size(&dev, "a").unwrap(), new);
            assert_eq!(lv_size(&dev, "b").unwrap(), 8 << 20, "b after write {n}");
        }
    }
    // The lvm2 tools read what a crash and a second run left.
    let dev = CrashDevice::new(&img, Some(writes), true);
    let _ = lvm::grow::extend(&dev, &vg, "a", None);
    dev.revive();
    lvm::grow::extend(&dev, &vg, "a", None).expect("grow again");
    let out = dir.0.join("out");
    dev.save(&img, &out);
    let sizes = sh(&format!(
        "lo=$(losetup -f --show {o}); export {LVM}; \
         {{ vgck {LVM_CONF} {vg} && lvs {LVM_CONF} --noheadings --units b --nosuffix -o lv_name,lv_size {vg}; }} 2>/dev/null; \
         r=$?; losetup -d $lo; exit $r",
        o = out.display()
    ));
    let mut got: Vec<(String, u64)> = sizes
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[1].parse().unwrap())
        })
        .collect();
    got.sort();
    assert_eq!(got, [("a".to_string(), new), ("b".to_string(), 8 << 20)]);
}
