//! A metadump file (xfs_metadump's v1 and v2 formats) given where an image
//! is expected is named as one, with what to do, instead of "bad magic".

mod common;

use common::fixtures::{xfskit_output, xfsprogs_72_or_skip};
use common::TempDir;
use std::fs::File;
use std::process::Command;

#[test]
fn metadump_files_are_named() {
    let Some(bin) = xfsprogs_72_or_skip("metadump_files_are_named") else {
        return;
    };
    let dir = TempDir::new("metadump-named");
    let img = dir.path().join("fs.img");
    let p = img.to_str().unwrap();
    File::create(&img).unwrap().set_len(1 << 30).unwrap();
    let out = Command::new(bin.join("mkfs.xfs"))
        .args(["-q", p])
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.xfs: {out:?}");
    for v in ["1", "2"] {
        let md = dir.path().join(format!("fs.md{v}"));
        let m = md.to_str().unwrap();
        let out = Command::new(bin.join("xfs_metadump"))
            .args(["-v", v, p, m])
            .output()
            .unwrap();
        assert!(out.status.success(), "xfs_metadump -v {v}: {out:?}");
        for cmd in ["info", "check", "ls"] {
            let out = xfskit_output(&[cmd, m]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(3),
                "xfskit {cmd} of a v{v} metadump: {err}"
            );
            assert!(
                err.contains(&format!("xfs_metadump file (format v{v})"))
                    && err.contains("xfskit mdrestore"),
                "xfskit {cmd} of a v{v} metadump: {err}"
            );
        }
    }
}
