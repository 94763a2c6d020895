//! `xfskit db IMAGE fsmap [START [END]]` against `xfs_db -r -c 'fsmap
//! START END'` of xfsprogs 7.2, line for line, on an image the kernel
//! filled until its rmap btrees have several levels: small files, a
//! fragmented file (an extent btree), preallocated (unwritten) extents,
//! attribute blocks and reflinked copies; over the whole filesystem and
//! over ranges that start and end inside records, nodes and AGs.

mod common;

use common::disks::sh;
use common::fixtures::{tool_72, xfsprogs_72_or_skip};
use common::TempDir;
use std::process::Command;

fn xfskit(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn fsmap_matches_xfs_db_over_every_range() {
    if !common::require_root("fsmap_matches_xfs_db_over_every_range") {
        return;
    }
    let Some(bin) = xfsprogs_72_or_skip("fsmap_matches_xfs_db_over_every_range") else {
        return;
    };
    let t = TempDir::new("xfskit-fsmap");
    let img = t.path().join("a.img");
    let imgs = img.to_str().unwrap();
    let mnt = t.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    sh(&format!("truncate -s 300M {imgs}"));
    tool_72(&bin, "mkfs.xfs", &["-q", "-b", "size=1024", imgs]);
    sh(&format!("mount -t xfs -o loop {imgs} {m}"));
    let io = bin.join("xfs_io");
    let io = io.display();
    // Every other block of a file: one extent each, an extent btree.
    let mut frag = String::new();
    for i in 0..600 {
        frag.push_str(&format!(" -c 'pwrite -q {} 1024'", i * 2048));
    }
    let fill = format!(
        "set -e; mkdir {m}/d; for i in $(seq 1 2500); do head -c $((i % 7 * 700 + 1)) /dev/zero > {m}/d/f$i; done; \
         {io} -f {frag} -c fsync {m}/frag; \
         for i in $(seq 1 40); do {io} -f -c 'falloc 0 9k' {m}/d/p$i; done; \
         for i in $(seq 1 30); do setfattr -n user.big -v $(head -c 1500 /dev/zero | tr '\\0' x) {m}/d/f$i; done; \
         for i in $(seq 1 30); do cp --reflink=always {m}/d/f$((i + 100)) {m}/d/r$i; done; sync"
    );
    let r = Command::new("sh").arg("-c").arg(&fill).output().unwrap();
    common::must_umount(&mnt);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let db = |range: &str| {
        tool_72(
            &bin,
            "xfs_db",
            &["-r", "-c", &format!("fsmap {range}"), imgs],
        )
    };
    let levels = tool_72(
        &bin,
        "xfs_db",
        &["-r", "-c", "agf 0", "-c", "p rmaplevel", imgs],
    );
    assert!(
        !levels.contains("rmaplevel = 1\n"),
        "the test wants an rmap btree with nodes: {levels}"
    );
    let whole = db("");
    for want in ["bmbt 1", "attrfork 1", "extflag 1", "owner -8"] {
        assert!(whole.contains(want), "no '{want}' mapping in the image");
    }
    let agblocks: u64 = tool_72(
        &bin,
        "xfs_db",
        &["-r", "-c", "sb 0", "-c", "p agblocks", imgs],
    )
    .trim()
    .trim_start_matches("agblocks = ")
    .parse()
    .unwrap();
    let agblklog = 64 - (agblocks - 1).leading_zeros() as u64;
    let fsb = |ag: u64, b: u64| (ag << agblklog) | b;
    let mut ranges = vec![
        String::new(),
        "0".into(),
        "0 0".into(),
        "10 20".into(),
        "1000".into(),
        "3000 999999999".into(),
        format!("{} {}", fsb(0, 2000), fsb(0, 2100)),
        format!("{} {}", fsb(0, agblocks - 10), fsb(1, 30)),
        format!("{} {}", fsb(1, 0), fsb(2, agblocks - 1)),
        format!("{}", fsb(3, 5)),
    ];
    // Ranges through the whole of AG 0, where the files are: a small
    // xorshift keeps them the same from run to run.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = x % 6000;
        let len = (x >> 32) % 900;
        ranges.push(format!("{a} {}", a + len));
    }
    for r in &ranges {
        let args: Vec<&str> = r.split_whitespace().collect();
        let mut cmd = vec!["db", imgs, "fsmap"];
        cmd.extend(&args);
        let (code, ours, err) = xfskit(&cmd);
        assert_eq!(code, 0, "fsmap {r}: {err}");
        let theirs = if r.is_empty() { whole.clone() } else { db(r) };
        if theirs.starts_with("Bad fsmap start_fsb") {
            // xfs_db takes only starts below the block count, though AG
            // numbers are encoded above it when the AG size is not a power
            // of two: xfskit lists what is there.
            assert!(ours.starts_with("0: 3/"), "fsmap {r}: {ours}");
            continue;
        }
        assert_eq!(ours, theirs, "fsmap {r}");
    }
    let (code, json, _) = xfskit(&["db", "--json", imgs, "fsmap", "0", "7"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["owner"], "fs", "{json}");
    // Bad ranges are usage errors, a filesystem without the btree
    // unsupported.
    assert_eq!(xfskit(&["db", imgs, "fsmap", "50", "40"]).0, 2);
    assert_eq!(xfskit(&["db", imgs, "fsmap", &fsb(9, 0).to_string()]).0, 2);
    assert_eq!(xfskit(&["db", imgs, "fsmap", "1", "x"]).0, 2);
    let nr = t.path().join("nr.img");
    let nrs = nr.to_str().unwrap();
    sh(&format!("truncate -s 300M {nrs}"));
    tool_72(
        &bin,
        "mkfs.xfs",
        &["-q", "-m", "rmapbt=0,reflink=0", "-n", "parent=0", nrs],
    );
    let (code, _, err) = xfskit(&["db", nrs, "fsmap"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("reverse-mapping"), "{err}");
}
