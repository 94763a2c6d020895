//! v4 (crc=0) filesystems through the library: images made by Debian's
//! mkfs.xfs with a protofile, read back (geometry, lookups, directories of
//! every format, file contents, symlinks, v1/v2 inode fields) and every
//! read-write open refused.

mod write_common;

use std::fs;
use std::path::Path;
use write_common::{run, skip};
use xfskit::inode::{read_at, ForkFormat};
use xfskit::{Error, Fs, OpenOptions};

/// Makes a 64 MiB v4 image at `img` with mkfs.xfs options `opts` and a
/// protofile holding a file, a 500-entry directory, a 40-entry directory
/// and a symlink; false (skip recorded) without mkfs.xfs.
fn make(img: &Path, dir: &Path, opts: &[&str]) -> bool {
    let data: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(dir.join("data.bin"), &data).unwrap();
    let mut proto = String::from("/dev/null\n0 0\nd--755 0 0\n");
    proto += &format!("data.bin ---640 7 8 {}\n", dir.join("data.bin").display());
    proto += "big d--750 1 2\n";
    for i in 0..500 {
        proto += &format!(
            "entry{i:04} ---600 0 0 {}\n",
            dir.join("data.bin").display()
        );
    }
    proto += "$\nsmall d--755 0 0\n";
    for i in 0..40 {
        proto += &format!("s{i} p--644 0 0\n");
    }
    proto += "$\nlink l--777 0 0 data.bin\n$\n";
    let p = dir.join("proto");
    fs::write(&p, proto).unwrap();
    fs::File::create(img).unwrap().set_len(64 << 20).unwrap();
    let mut args = vec!["-q", "-f", "-m", "crc=0"];
    args.extend_from_slice(opts);
    let (ps, is) = (
        p.to_str().unwrap().to_string(),
        img.to_str().unwrap().to_string(),
    );
    args.extend_from_slice(&["-p", &ps, &is]);
    std::env::set_var("TEST_DIR", "/tmp");
    std::env::set_var("TEST_DEV", "/dev/null");
    std::env::set_var("QA_CHECK_FS", "1");
    let (ok, out) = run("mkfs.xfs", &args);
    if !ok && out.contains("cannot run") {
        skip("read_v4", &out);
        return false;
    }
    assert!(ok, "mkfs.xfs {opts:?}: {out}");
    true
}

#[test]
fn v4_images_read_through_the_library() {
    let tmp = std::env::temp_dir().join(format!("read-v4-{}", std::process::id()));
    fs::create_dir_all(&tmp).unwrap();
    for (k, opts) in [
        &["-n", "ftype=0", "-i", "size=256,attr=1", "-l", "version=1"][..],
        &["-i", "size=512"][..],
    ]
    .into_iter()
    .enumerate()
    {
        let img = tmp.join(format!("v4-{k}.img"));
        if !make(&img, &tmp, opts) {
            return;
        }
        let fs_ = Fs::open(&img, &OpenOptions::default()).expect("open v4");
        let geo = fs_.geometry();
        assert!(!geo.v5, "{opts:?}");
        assert_eq!(geo.features.ftype, k == 1, "{opts:?}: ftype");
        assert_eq!(geo.inode_size, if k == 0 { 256 } else { 512 });
        // The file: contents, owner and mode from the protofile.
        let f = fs_.lookup_path(b"/data.bin").expect("lookup data.bin");
        assert_eq!((f.uid, f.gid, f.perm(), f.nlink), (7, 8, 0o640, 1));
        let mut buf = vec![0u8; f.size as usize];
        let n = read_at(&fs_, &f, 0, &mut buf).expect("read data.bin");
        assert_eq!(n, 70_000);
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));
        // A directory of 500 entries (leaf form) and one of 40 (block).
        let big = fs_.lookup_path(b"/big").expect("lookup big");
        assert_eq!((big.uid, big.gid, big.perm()), (1, 2, 0o750));
        assert_ne!(big.format, ForkFormat::Local);
        let ents = xfskit::dir::read_dir(&fs_, &big).expect("readdir big");
        assert_eq!(ents.len(), 500);
        for e in &ents {
            // Without ftype the entry carries no type; with it, a file.
            assert_eq!(e.file_type.is_some(), k == 1, "{:?}", e.name);
        }
        let hit = xfskit::dir::lookup(&fs_, &big, b"entry0333").unwrap();
        assert_eq!(hit, Some(ents[333].ino));
        assert_eq!(xfskit::dir::lookup(&fs_, &big, b"entry9999").unwrap(), None);
        let small = fs_.lookup_path(b"/small").unwrap();
        assert_eq!(xfskit::dir::read_dir(&fs_, &small).unwrap().len(), 40);
        let link = fs_.lookup_path(b"/link").unwrap();
        assert_eq!(
            xfskit::symlink::read_link(&fs_, &link).unwrap(),
            b"data.bin"
        );
        // Writing is refused with the v4 message.
        match Fs::open_rw(&img, &OpenOptions::default()) {
            Err(Error::Unsupported(m)) => assert!(m.contains("read-only"), "{m}"),
            Err(e) => panic!("open_rw: {e}"),
            Ok(_) => panic!("open_rw of a v4 filesystem succeeded"),
        }
    }
    let _ = fs::remove_dir_all(&tmp);
}
