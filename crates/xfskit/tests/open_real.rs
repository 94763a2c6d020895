//! Opens filesystems made by the installed mkfs.xfs.

use std::process::Command;
use xfskit::{Fs, OpenOptions};

fn mkfs(args: &[&str]) -> Option<tempfile_path::TempImage> {
    tempfile_path::TempImage::mkfs(args)
}

mod tempfile_path {
    use std::path::PathBuf;
    use std::process::Command;

    pub struct TempImage(pub PathBuf);

    impl TempImage {
        pub fn mkfs(args: &[&str]) -> Option<TempImage> {
            if Command::new("mkfs.xfs").arg("-V").output().is_err() {
                xfskit_testkit::skip("open_real", "mkfs.xfs is not installed");
                return None;
            }
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let p =
                std::env::temp_dir().join(format!("xfskit-open-{}-{n}.img", std::process::id()));
            let f = std::fs::File::create(&p).ok()?;
            f.set_len(300 << 20).ok()?;
            let st = Command::new("mkfs.xfs")
                .args(["-q", "-f"])
                .args(args)
                .arg(&p)
                .status()
                .ok()?;
            assert!(st.success(), "mkfs.xfs {args:?} failed");
            Some(TempImage(p))
        }
    }

    impl Drop for TempImage {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn opens_fresh_default_fs_and_reads_root() {
    let Some(img) = mkfs(&[]) else { return };
    let fs = Fs::open(&img.0, &OpenOptions::default()).expect("open");
    let g = fs.geometry();
    assert_eq!(g.block_size, 4096);
    assert!(g.ag_count >= 4);
    let root = fs.root().expect("root inode");
    assert_eq!(root.file_type, xfskit::inode::FileType::Dir);
    assert_eq!(*fs.log_state(), xfskit::log::LogState::Clean);
}

#[test]
fn opens_small_blocks_and_big_inodes() {
    for args in [
        &["-b", "size=1024"][..],
        &["-i", "size=2048"],
        &["-b", "size=65536"],
        &["-s", "size=4096"],
    ] {
        let Some(img) = mkfs(args) else { return };
        let fs =
            Fs::open(&img.0, &OpenOptions::default()).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        fs.root().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
}

#[test]
fn opens_v4_read_only() {
    let Some(img) = mkfs(&["-m", "crc=0"]) else {
        return;
    };
    let fs = Fs::open(&img.0, &OpenOptions::default()).expect("v4 opens for reading");
    assert!(!fs.geometry().v5);
    match Fs::open_rw(&img.0, &OpenOptions::default()) {
        Err(xfskit::Error::Unsupported(m)) => assert!(m.contains("read-only"), "{m}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("v4 opened for writing"),
    }
    let _ = Command::new("true").status();
}
