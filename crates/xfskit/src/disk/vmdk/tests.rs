//! Round trips of the writers and hostile input to the readers: damaged
//! headers, tables and streams are errors, never panics, hangs or
//! allocations out of proportion to the file.

use super::header::{Header, SECTOR};
use super::*;
use crate::dev::MemDevice;
use crate::disk::container::local_opener;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-vmdk-unit-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn open_bytes(b: Vec<u8>) -> Result<Arc<dyn Device>> {
    open(
        Path::new("test.vmdk"),
        Box::new(MemDevice::from_bytes(b)),
        &local_opener,
    )
}

fn read_all(d: &dyn Device) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; d.len() as usize];
    d.read_at(&mut b, 0)?;
    Ok(b)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
}

/// A monolithicSparse file of 4 MiB with grains 0 and 40 written.
fn sparse_image() -> Vec<u8> {
    let p = tmp("sparse.vmdk");
    let new = create(&p, 4 << 20, false).unwrap();
    new.device.write_at(&pattern(70_000), 0).unwrap();
    new.device.write_at(&pattern(5000), 40 << 16).unwrap();
    new.finish().unwrap();
    let b = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    b
}

/// A streamOptimized file of 4 MiB, grain 0 written twice.
fn stream_image() -> Vec<u8> {
    let p = tmp("stream.vmdk");
    let new = create(&p, 4 << 20, true).unwrap();
    new.device.write_at(&pattern(70_000), 0).unwrap();
    new.device.write_at(&[0u8; 512], 3 << 20).unwrap();
    new.device.write_at(b"again", 100).unwrap();
    new.finish().unwrap();
    let b = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    b
}

fn header_of(b: &[u8]) -> Header {
    Header::parse(&b[..512]).unwrap()
}

fn put_header(b: &mut [u8], h: &Header) {
    b[..512].copy_from_slice(&h.to_sector());
}

fn expect_err(b: Vec<u8>, what: &str) -> String {
    match open_bytes(b).and_then(|d| read_all(d.as_ref()).map_err(Error::Io)) {
        Ok(_) => panic!("{what}: read without error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sparse_writes_read_back_and_reopen() {
    let b = sparse_image();
    let d = open_bytes(b).unwrap();
    assert_eq!(d.len(), 4 << 20);
    let all = read_all(d.as_ref()).unwrap();
    assert_eq!(&all[..70_000], &pattern(70_000)[..]);
    assert!(all[70_000..40 << 16].iter().all(|&x| x == 0));
    assert_eq!(&all[40 << 16..(40 << 16) + 5000], &pattern(5000)[..]);
    assert!(probe(b"KDMV\x01\0\0\0"));
    assert_eq!(disk_size(1), 65536);
    assert_eq!(disk_size(65536 * 3), 65536 * 3);
}

#[test]
fn stream_writes_read_back_with_the_newer_copy() {
    let b = stream_image();
    let h = header_of(&b);
    assert_eq!(h.gd_offset, header::GD_AT_END);
    let d = open_bytes(b).unwrap();
    let all = read_all(d.as_ref()).unwrap();
    let mut want = pattern(70_000);
    want[100..105].copy_from_slice(b"again");
    assert_eq!(&all[..70_000], &want[..]);
    assert!(all[70_000..].iter().all(|&x| x == 0));
}

#[test]
fn stream_rewrites_after_eviction_are_merged() {
    let p = tmp("evict.vmdk");
    let new = create(&p, 64 << 20, true).unwrap();
    // More grains than the buffer holds, then grain 0 again.
    for g in 0..1000u64 {
        new.device.write_at(&[g as u8 | 1; 4096], g << 16).unwrap();
    }
    new.device.write_at(b"superblock", 10).unwrap();
    let mut b = [0u8; 16];
    new.device.read_at(&mut b, 0).unwrap();
    assert_eq!(&b[10..16], b"superb");
    new.finish().unwrap();
    let d = open(
        &p,
        Box::new(FileDevice::open_read_only(&p).unwrap()),
        &local_opener,
    )
    .unwrap();
    let mut b = vec![0u8; 65536];
    d.read_at(&mut b, 0).unwrap();
    assert_eq!(&b[..10], &[1u8; 10]);
    assert_eq!(&b[10..20], b"superblock");
    assert_eq!(&b[20..4096], &[1u8; 4076][..]);
    d.read_at(&mut b, 999 << 16).unwrap();
    assert_eq!(b[4095], 999u64 as u8 | 1);
    assert_eq!(b[4096], 0);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn in_place_writes_refused_on_streams() {
    let p = tmp("refuse.vmdk");
    let new = create(&p, 1 << 20, true).unwrap();
    new.finish().unwrap();
    match open_rw(&p) {
        Err(Error::Unsupported(m)) => assert!(m.contains("written once"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened for writing"),
    }
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn damaged_headers_are_errors() {
    let good = sparse_image();
    // Truncated.
    for n in [0usize, 3, 4, 100, 511] {
        let r = open_bytes(good[..n].to_vec());
        assert!(r.is_err(), "truncated to {n}");
    }
    let h = header_of(&good);
    let mut cases: Vec<(&str, Header)> = Vec::new();
    let mut x = h.clone();
    x.grain = 0;
    cases.push(("grain 0", x));
    let mut x = h.clone();
    x.grain = 1 << 40;
    cases.push(("huge grain", x));
    let mut x = h.clone();
    x.gtes = 0;
    cases.push(("no table entries", x));
    let mut x = h.clone();
    x.gtes = u32::MAX;
    cases.push(("huge tables", x));
    let mut x = h.clone();
    x.capacity = u64::MAX;
    cases.push(("huge capacity", x));
    // A GD of 2^30 entries in a file of a few hundred KiB.
    let mut x = h.clone();
    x.capacity = 1 << 39;
    x.grain = 1;
    x.gtes = 1;
    cases.push(("huge GD", x));
    let mut x = h.clone();
    x.gd_offset = u64::MAX / 2;
    cases.push(("GD past the end", x));
    let mut x = h.clone();
    x.version = 9;
    cases.push(("version 9", x));
    let mut x = h.clone();
    x.gd_offset = header::GD_AT_END;
    cases.push(("footer missing", x));
    for (what, x) in cases {
        let mut b = good.clone();
        put_header(&mut b, &x);
        let e = expect_err(b, what);
        println!("{what}: {e}");
    }
}

#[test]
fn table_entries_past_the_end_are_errors() {
    let good = sparse_image();
    let h = header_of(&good);
    let gd_at = (h.gd_offset * SECTOR) as usize;
    let gt0 = u32::from_le_bytes(good[gd_at..gd_at + 4].try_into().unwrap()) as usize * 512;
    // GT entry 3 points far past the end.
    let mut b = good.clone();
    b[gt0 + 12..gt0 + 16].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
    let e = expect_err(b, "grain past the end");
    assert!(e.contains("grain table 0 entry 3"), "{e}");
    // The GD entry points past the end.
    let mut b = good.clone();
    b[gd_at..gd_at + 4].copy_from_slice(&0x0fff_ffffu32.to_le_bytes());
    let e = expect_err(b, "table past the end");
    assert!(e.contains("grain directory entry 0"), "{e}");
}

#[test]
fn damaged_streams_are_errors() {
    let good = stream_image();
    let h = header_of(&good);
    assert!(h.compressed());
    // Find grain 0's marker: the first sector after the overhead.
    let at = (h.overhead * SECTOR) as usize;
    let size = u32::from_le_bytes(good[at + 8..at + 12].try_into().unwrap()) as usize;
    assert!(size > 0 && size < 65536);
    // Garbled deflate data.
    let mut b = good.clone();
    for x in &mut b[at + 14..at + 12 + size] {
        *x ^= 0x5a;
    }
    let e = expect_err(b, "bad deflate");
    assert!(e.contains("grain"), "{e}");
    // A marker claiming more compressed bytes than the file has.
    let mut b = good.clone();
    b[at + 8..at + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    expect_err(b, "huge marker");
    // A zero-length marker.
    let mut b = good.clone();
    b[at + 8..at + 12].copy_from_slice(&0u32.to_le_bytes());
    expect_err(b, "empty marker");
    // Cut before the footer: no footer.
    let n = good.len() - 512;
    expect_err(good[..n].to_vec(), "no end-of-stream");
    // A zlib bomb's worth of zeros: inflation stops after one grain.
    let mut out = vec![0u8; 65536];
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut enc, &vec![0u8; 50 << 20]).unwrap();
    let bomb = enc.finish().unwrap();
    assert!(sparse::inflate_into(&bomb, &mut out).is_err());
}

#[test]
fn malformed_descriptors_are_errors() {
    let dir = tmp("d").parent().unwrap().join("desc");
    std::fs::create_dir_all(&dir).unwrap();
    let flat = dir.join("d-flat.vmdk");
    std::fs::write(&flat, pattern(1 << 20)).unwrap();
    let desc = |body: &str| {
        format!("# Disk DescriptorFile\nversion=1\nCID=1\nparentCID=ffffffff\ncreateType=\"monolithicFlat\"\n{body}")
    };
    let open_desc = |text: String| {
        let p = dir.join("d.vmdk");
        std::fs::write(&p, &text).unwrap();
        assert!(probe(text.as_bytes()));
        open(
            &p,
            Box::new(FileDevice::open_read_only(&p).unwrap()),
            &local_opener,
        )
    };
    let d = open_desc(desc("RW 2048 FLAT \"d-flat.vmdk\" 0\nRW 100 ZERO\n")).unwrap();
    assert_eq!(d.len(), 2148 * 512);
    let all = read_all(d.as_ref()).unwrap();
    assert_eq!(&all[..1 << 20], &pattern(1 << 20)[..]);
    assert!(all[1 << 20..].iter().all(|&x| x == 0));
    for (body, what) in [
        (
            "RW 4096 FLAT \"d-flat.vmdk\" 0\n",
            "flat extent longer than its file",
        ),
        (
            "RW 10 FLAT \"d-flat.vmdk\" 99999999999999999999\n",
            "bad offset",
        ),
        ("RW 10 FLAT \"missing.vmdk\" 0\n", "missing extent file"),
        (
            "RW 10 SPARSE \"d-flat.vmdk\"\n",
            "sparse extent without a header",
        ),
        (
            "RW 18446744073709551615 FLAT \"d-flat.vmdk\" 0\n",
            "overflowing size",
        ),
        ("", "no extents"),
        ("RW 10 FLAT \"d-flat.vmdk\n", "unclosed name"),
    ] {
        assert!(open_desc(desc(body)).is_err(), "{what}");
    }
    let child = desc("RW 2048 FLAT \"d-flat.vmdk\" 0\n")
        .replace("parentCID=ffffffff", "parentCID=1234abcd");
    match open_desc(child) {
        Err(Error::Unsupported(m)) => assert!(m.contains("parentCID"), "{m}"),
        _ => panic!("a child disk opened"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn tar_header(name: &str, size: usize) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut t = Vec::new();
    for (name, data) in members {
        t.extend_from_slice(&tar_header(name, data.len()));
        t.extend_from_slice(data);
        t.resize(t.len().div_ceil(512) * 512, 0);
    }
    t.resize(t.len() + 1024, 0);
    t
}

#[test]
fn ova_packages_read_through_their_vmdk_member() {
    let disk = stream_image();
    let ovf = b"<?xml version=\"1.0\"?><Envelope/>\n";
    let t = tar(&[
        ("pkg.ovf", ovf),
        ("pkg.mf", b"SHA1(x)= 0\n"),
        ("pkg-disk1.vmdk", &disk),
    ]);
    assert!(probe(&t[..512]));
    let d = open_bytes(t.clone()).unwrap();
    let all = read_all(d.as_ref()).unwrap();
    assert_eq!(&all[105..70_000], &pattern(70_000)[105..]);
    // Without a disk; with the disk member cut short; a bad checksum.
    let e = open_bytes(tar(&[("pkg.ovf", ovf)])).err().unwrap();
    assert!(e.to_string().contains("no .vmdk"), "{e}");
    let n = t.len() - 1024 - 4096;
    assert!(open_bytes(t[..n].to_vec()).is_err());
    let mut b = t.clone();
    b[1024 + 3] ^= 1; // the name in the second header: its checksum fails
    assert!(open_bytes(b).is_err());
}
