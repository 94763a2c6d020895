//! `xfskit build` end to end: every golden fixture, mounted by the kernel,
//! is the source; the image xfskit builds from it must pass `xfs_repair -n`
//! and `xfskit check`, and the kernel must read back exactly the source
//! tree (names, types, modes, owners, sizes, nanosecond mtimes, device
//! numbers, symlink targets, every xattr, contents, hard link groups). The
//! same again from a tar stream (pax, xattrs, sparse, zstd) of the same
//! tree, and byte-identical images from two `--reproducible` builds.

mod common;

use common::{
    assert_kernel_sees, fixture_names, repair_check, require_root, unpack_fixture, walk_host,
    LoopMount, TempDir,
};
use std::path::Path;
use std::process::{Command, Stdio};

fn xfskit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .output()
        .expect("run xfskit")
}

fn build_ok(args: &[&str]) {
    let out = xfskit(args);
    assert!(
        out.status.success(),
        "xfskit {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The built image is clean for xfs_repair and xfskit check, and the
/// kernel sees `want` in it.
fn verify(img: &Path, want: &[common::Entry], tmp: &Path, what: &str) {
    let (code, text) = repair_check(img);
    assert_eq!(code, 0, "{what}: xfs_repair -n found problems:\n{text}");
    let out = xfskit(&["check", &img.display().to_string()]);
    assert!(
        out.status.success(),
        "{what}: xfskit check: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_kernel_sees(img, &tmp.join(format!("mnt-{what}")), want, true, what);
}

#[test]
fn build_every_fixture_from_directory_and_tar() {
    if !require_root("build_every_fixture_from_directory_and_tar") {
        return;
    }
    for name in fixture_names() {
        let tmp = TempDir::new(&format!("build-{name}"));
        let src_img = unpack_fixture(&name, tmp.path());
        let src_mnt = tmp.path().join("src");
        std::fs::create_dir_all(&src_mnt).unwrap();
        let src = LoopMount::new(&src_img, &src_mnt).unwrap();
        let want = walk_host(src.path());

        // From the mounted directory.
        let img = tmp.path().join("dir.img");
        build_ok(&[
            "build",
            "-q",
            &src_mnt.display().to_string(),
            &img.display().to_string(),
        ]);
        verify(&img, &want, tmp.path(), &format!("{name}-dir"));

        // From a zstd-compressed pax tar of the same tree, on stdin.
        let tar = tmp.path().join("src.tar.zst");
        let sh = format!(
            "tar --xattrs --xattrs-include='*' --sparse --format=pax --numeric-owner -C {} -cf - . | zstd -q -o {}",
            src_mnt.display(),
            tar.display()
        );
        let st = Command::new("sh").args(["-c", &sh]).status().unwrap();
        assert!(st.success(), "tar of {name} failed");
        drop(src);
        let img2 = tmp.path().join("tar.img");
        let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["build", "-q", "-", &img2.display().to_string()])
            .stdin(Stdio::from(std::fs::File::open(&tar).unwrap()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: build from tar on stdin: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The root directory's own entry is not compared (tar's "." entry
        // is optional): everything below it is.
        // Sockets cannot be archived by tar.
        let want_tar: Vec<common::Entry> = want
            .iter()
            .filter(|e| !e.path.is_empty() && e.kind != common::Kind::Socket)
            .cloned()
            .collect();
        verify_below_root(&img2, &want_tar, tmp.path(), &format!("{name}-tar"));

        // The same archive through a pipe with the size given: read once,
        // as it comes (nothing spooled, nothing scanned ahead).
        let img3 = tmp.path().join("pipe.img");
        let sh = format!(
            "cat {} | {} build -q --size 512m - {}",
            tar.display(),
            env!("CARGO_BIN_EXE_xfskit"),
            img3.display()
        );
        let out = Command::new("sh").args(["-c", &sh]).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: build from a pipe: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        verify_below_root(&img3, &want_tar, tmp.path(), &format!("{name}-pipe"));
    }
}

/// `xfs_repair -n` finds nothing in `img`, and the kernel sees `want`
/// below the root.
fn verify_below_root(img: &Path, want: &[common::Entry], tmp: &Path, what: &str) {
    let (code, text) = repair_check(img);
    assert_eq!(code, 0, "{what}: xfs_repair -n:\n{text}");
    assert_kernel_sees(img, &tmp.join(format!("mnt-{what}")), want, false, what);
}

#[test]
fn reproducible_builds_are_byte_identical() {
    let tmp = TempDir::new("build-repro");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    for i in 0..200 {
        std::fs::write(src.join(format!("d/f{i}")), vec![i as u8; i * 37]).unwrap();
    }
    std::os::unix::fs::symlink("d/f1", src.join("link")).unwrap();
    std::fs::hard_link(src.join("d/f2"), src.join("d/e/hard")).unwrap();
    // Reading the source must not change it between the two builds:
    // atimes in the near future are left alone by relatime.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    for e in std::fs::read_dir(src.join("d")).unwrap() {
        let f = std::fs::File::options().write(true).open(e.unwrap().path());
        if let Ok(f) = f {
            f.set_times(std::fs::FileTimes::new().set_accessed(later))
                .unwrap();
        }
    }
    let a = tmp.path().join("a.img");
    let b = tmp.path().join("b.img");
    for img in [&a, &b] {
        let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args([
                "build",
                "-q",
                "--reproducible",
                &src.display().to_string(),
                &img.display().to_string(),
            ])
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(x.len(), y.len());
    let first = x.iter().zip(&y).position(|(p, q)| p != q);
    assert_eq!(first, None, "the two images differ at byte {first:?}");
    let (code, text) = repair_check(&a);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn too_small_image_is_a_clear_error() {
    let tmp = TempDir::new("build-small");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // 400 MiB of incompressible-looking data cannot fit a 300 MiB image.
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for i in 0..4 {
        let mut f = std::fs::File::create(src.join(format!("big{i}"))).unwrap();
        for _ in 0..100 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
    }
    let img = tmp.path().join("small.img");
    let out = xfskit(&[
        "build",
        "-q",
        "--size",
        "300m",
        &src.display().to_string(),
        &img.display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("space"),
        "error does not say what ran out: {err}"
    );
}
