//! `xfskit log --items` against `xfs_logprint -t` of xfsprogs 7.2 on a log
//! the kernel left dirty (a forced shutdown after files were made): the
//! same items in the same order, and for each the same inode number,
//! logged-part flags and region count (INODE), disk address, length, flags
//! and region count (BUF), AG, block, length, count, inode size and
//! generation (ICREATE).

mod common;

use common::disks::sh;
use common::fixtures::{tool_72, xfsprogs_72_or_skip};
use common::TempDir;
use std::process::Command;

/// `key:VALUE` out of an xfs_logprint line (hex with 0x, else decimal).
fn field(line: &str, key: &str) -> u64 {
    let at = line
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {line:?}"));
    let v = line[at + key.len()..].trim_start();
    let v: String = v
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => v.parse().unwrap(),
    }
}

/// Each item xfs_logprint -t describes, as comparable text.
fn from_logprint(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if t.starts_with("INODE: #regs:") {
            out.push(format!(
                "INODE {} {:#x} {}",
                field(t, "ino:"),
                field(t, "flags:"),
                field(t, "#regs:")
            ));
        } else if t.starts_with("BUF:  #regs:") {
            out.push(format!(
                "BUF {} {} {:#x} {}",
                field(t, "blkno:"),
                field(t, "len:"),
                field(t, "flags:"),
                field(t, "#regs:")
            ));
        } else if t.starts_with("ICR:  #ag:") {
            let next = lines[i + 1];
            out.push(format!(
                "ICREATE {} {} {} {} {} {:#x}",
                field(t, "#ag:"),
                field(t, "agbno:"),
                field(t, "len:"),
                field(next, "cnt:"),
                field(next, "isize:"),
                field(next, "gen:")
            ));
        }
    }
    out
}

/// The same from xfskit's JSON.
fn from_xfskit(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in v["transaction_list"].as_array().expect("transactions") {
        for d in t["item_details"].as_array().expect("item details") {
            match d["type"].as_str().unwrap() {
                "INODE" => out.push(format!(
                    "INODE {} {:#x} {}",
                    d["ino"],
                    d["fields"].as_u64().unwrap(),
                    d["regions"]
                )),
                "BUF" => out.push(format!(
                    "BUF {} {} {:#x} {}",
                    d["daddr"],
                    d["len_bb"],
                    d["flags"].as_u64().unwrap(),
                    d["regions"]
                )),
                "ICREATE" => out.push(format!(
                    "ICREATE {} {} {} {} {} {:#x}",
                    d["agno"],
                    d["agbno"],
                    d["length"],
                    d["count"],
                    d["isize"],
                    d["gen"].as_u64().unwrap()
                )),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn items_match_xfs_logprint() {
    if !common::require_root("items_match_xfs_logprint") {
        return;
    }
    let Some(bin) = xfsprogs_72_or_skip("items_match_xfs_logprint") else {
        return;
    };
    let t = TempDir::new("xfskit-logitems");
    let img = t.path().join("a.img");
    let imgs = img.to_str().unwrap();
    let mnt = t.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    sh(&format!("truncate -s 600M {imgs}"));
    tool_72(&bin, "mkfs.xfs", &["-q", imgs]);
    sh(&format!("mount -t xfs -o loop {imgs} {m}"));
    let io = bin.join("xfs_io");
    let r = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "set -e; mkdir {m}/d {m}/e; for i in $(seq 1 300); do echo $i > {m}/d/f$i; done; \
             setfattr -n user.a -v $(head -c 300 /dev/zero | tr '\\0' y) {m}/d/f1; \
             head -c 3M /dev/zero > {m}/e/big; mv {m}/d/f2 {m}/e/; \
             {} -x -c 'shutdown -f' {m}",
            io.display()
        ))
        .output()
        .unwrap();
    common::must_umount(&mnt);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let theirs = from_logprint(&tool_72(&bin, "xfs_logprint", &["-t", imgs]));
    let o = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["log", "--items", "--json", imgs])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ours = from_xfskit(&v);
    assert!(theirs.len() > 100, "{} items in the log", theirs.len());
    for kind in ["INODE", "BUF", "ICREATE"] {
        assert!(theirs.iter().any(|l| l.starts_with(kind)), "no {kind} item");
    }
    assert_eq!(ours, theirs);
    // The text form names the same.
    let o = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["log", "--items", imgs])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(" (AGI) flags 0x3800"), "{text}");
    assert!(text.contains("ICREATE AG 0 block "), "{text}");
}
