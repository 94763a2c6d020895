//! Unit tests of the VHDX reader and writer: round trips through files
//! this module and qemu-img make, the log (entries written and not yet
//! applied, replayed in memory and on the file), a differencing disk made
//! by hand, and damaged files that must give errors.

use super::header::{set_crc, HEADER_OFFSETS, REGION_OFFSETS};
use super::write::{create, CreateOptions};
use super::*;
use crate::bytes::{put_le32, put_le64};
use crate::dev::FileDevice;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file in memory that grows when written past its end, and fails every
/// write from the `limit`-th on (a crash).
struct Grow {
    data: Mutex<Vec<u8>>,
    writes: AtomicU64,
    limit: Mutex<Option<u64>>,
}

impl Grow {
    fn new(bytes: Vec<u8>, limit: Option<u64>) -> Grow {
        Grow {
            data: Mutex::new(bytes),
            writes: AtomicU64::new(0),
            limit: Mutex::new(limit),
        }
    }
    fn bytes(&self) -> Vec<u8> {
        self.data.lock().unwrap().clone()
    }
}

impl Device for Grow {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let d = self.data.lock().unwrap();
        let end = off as usize + buf.len();
        if end > d.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        buf.copy_from_slice(&d[off as usize..end]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        if self.limit.lock().unwrap().is_some_and(|l| n >= l) {
            return Err(io::Error::other("crashed"));
        }
        let mut d = self.data.lock().unwrap();
        let end = off as usize + buf.len();
        if end > d.len() {
            d.resize(end, 0);
        }
        d[off as usize..end].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.data.lock().unwrap().len() as u64
    }
}

impl Device for Arc<Grow> {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.as_ref().read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.as_ref().write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.as_ref().len()
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-vhdx-unit-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn have_qemu() -> bool {
    Command::new("qemu-img")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn qemu(args: &[&str]) -> (bool, String) {
    let o = Command::new("qemu-img")
        .args(args)
        .output()
        .expect("qemu-img");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

fn no_opener(_: &Path, name: &str) -> Result<(PathBuf, Box<dyn Device>)> {
    Err(Error::Unsupported(format!("no parent {name} in this test")))
}

fn open_mem(bytes: Vec<u8>) -> Result<Vhdx> {
    open_vhdx(
        Path::new("mem.vhdx"),
        Box::new(Grow::new(bytes, None)),
        &no_opener,
    )
}

/// Writes made into a new file read back, and qemu-img agrees.
#[test]
fn create_write_read_back() {
    let p = tmp("new.vhdx");
    let size = 40 * MIB + 512;
    let v = create(&p, size, CreateOptions::default()).unwrap();
    assert_eq!(v.len(), size);
    let a = pattern(70_000, 1);
    let b = pattern(4096, 2);
    v.write_at(&a, 3 * MIB - 1000).unwrap();
    v.write_at(&b, size - 4096).unwrap();
    v.write_at(&[0u8; 8192], 20 * MIB).unwrap();
    v.flush().unwrap();
    drop(v);
    let r = open_vhdx(
        &p,
        Box::new(FileDevice::open_read_only(&p).unwrap()),
        &no_opener,
    )
    .unwrap();
    let mut got = vec![0u8; a.len()];
    r.read_at(&mut got, 3 * MIB - 1000).unwrap();
    assert_eq!(got, a);
    let mut got = vec![0u8; 4096];
    r.read_at(&mut got, size - 4096).unwrap();
    assert_eq!(got, b);
    r.read_at(&mut got, 20 * MIB).unwrap();
    assert!(got.iter().all(|&x| x == 0));
    // Three blocks of 8 MiB allocated (the last write straddles two),
    // nothing for the zeros.
    let flen = std::fs::metadata(&p).unwrap().len();
    assert_eq!(flen, 4 * MIB + 3 * 8 * MIB, "file length");
    if have_qemu() {
        let ps = p.to_str().unwrap();
        let (ok, out) = qemu(&["check", ps]);
        assert!(ok, "qemu-img check: {out}");
        let raw = tmp("new.raw");
        let (ok, out) = qemu(&["convert", "-O", "raw", ps, raw.to_str().unwrap()]);
        assert!(ok, "{out}");
        let img = std::fs::read(&raw).unwrap();
        assert_eq!(img.len() as u64, size);
        let at = (3 * MIB - 1000) as usize;
        assert_eq!(&img[at..at + a.len()], &a[..]);
        assert_eq!(&img[img.len() - 4096..], &b[..]);
    } else {
        println!("SKIP the qemu-img half of create_write_read_back: no qemu-img");
    }
}

/// Files qemu-img converts (dynamic, fixed, 1 MiB and 8 MiB blocks, a
/// bigger log) read as the raw disk; then written in place by us, qemu-img
/// checks them and reads what we wrote.
#[test]
fn qemu_made_files_read_and_write() {
    if !have_qemu() {
        println!("SKIP qemu_made_files_read_and_write: no qemu-img");
        return;
    }
    let raw = tmp("src.raw");
    let size = 20 * MIB;
    let mut img = vec![0u8; size as usize];
    for (i, c) in img.chunks_mut(MIB as usize).enumerate() {
        if i % 3 != 1 {
            c.copy_from_slice(&pattern(MIB as usize, i as u8));
        }
    }
    std::fs::write(&raw, &img).unwrap();
    for (n, opts) in [
        "subformat=dynamic",
        "subformat=fixed",
        "block_size=1M",
        "block_size=8M,log_size=4M",
        "subformat=fixed,block_size=8M",
    ]
    .iter()
    .enumerate()
    {
        let p = tmp(&format!("q{n}.vhdx"));
        let ps = p.to_str().unwrap();
        let (ok, out) = qemu(&[
            "convert",
            "-O",
            "vhdx",
            "-o",
            opts,
            raw.to_str().unwrap(),
            ps,
        ]);
        assert!(ok, "{opts}: {out}");
        let v = open_vhdx(
            &p,
            Box::new(FileDevice::open_read_only(&p).unwrap()),
            &no_opener,
        )
        .unwrap();
        assert_eq!(v.is_fixed(), opts.contains("fixed"), "{opts}");
        let mut got = vec![0u8; size as usize];
        v.read_at(&mut got, 0).unwrap();
        assert!(got == img, "{opts}: contents differ");
        drop(v);
        // In place: a new block, an overwrite, zeros over a hole.
        let w = open_rw(&p).unwrap();
        let a = pattern(300_000, 9);
        w.write_at(&a, MIB + 12345).unwrap();
        w.write_at(&a[..4096], 7 * MIB).unwrap();
        w.write_at(&[0u8; 4096], 4 * MIB).unwrap();
        w.flush().unwrap();
        drop(w);
        let (ok, out) = qemu(&["check", ps]);
        assert!(ok, "{opts}: qemu-img check: {out}");
        let back = tmp(&format!("q{n}.raw"));
        let (ok, out) = qemu(&["convert", "-O", "raw", ps, back.to_str().unwrap()]);
        assert!(ok, "{opts}: {out}");
        let mut want = img.clone();
        want[(MIB + 12345) as usize..(MIB + 12345) as usize + a.len()].copy_from_slice(&a);
        want[(7 * MIB) as usize..(7 * MIB + 4096) as usize].copy_from_slice(&a[..4096]);
        want[(4 * MIB) as usize..(4 * MIB + 4096) as usize].fill(0);
        assert!(
            std::fs::read(&back).unwrap() == want,
            "{opts}: qemu-img reads other bytes"
        );
    }
}

/// A VHDX made by `create` in memory, a few blocks written; its bytes.
fn small_image(blocks_written: &[u64]) -> (PathBuf, Vec<u8>) {
    let p = tmp(&format!("small-{}.vhdx", blocks_written.len()));
    let v = create(
        &p,
        16 * MIB,
        CreateOptions {
            block: Some(MIB),
            ..Default::default()
        },
    )
    .unwrap();
    for &b in blocks_written {
        v.write_at(&pattern(MIB as usize, b as u8), b * MIB)
            .unwrap();
    }
    v.flush().unwrap();
    drop(v);
    let bytes = std::fs::read(&p).unwrap();
    (p, bytes)
}

/// A write into a new block cut at every host write: each cut file opens
/// read-only (the log replayed in memory, the file untouched) and reads
/// the old or the new data; opened for writing, the log is replayed onto
/// the file, and qemu-img accepts what it leaves.
#[test]
fn log_replay_after_every_cut() {
    let (_, base) = small_image(&[0, 1]);
    let new = pattern(MIB as usize, 77);
    let old = vec![0u8; MIB as usize];
    // Count the host writes of the edit.
    let full = Arc::new(Grow::new(base.clone(), None));
    {
        let v = open_rw_on(Path::new("mem.vhdx"), full.clone()).unwrap();
        v.write_at(&new, 5 * MIB).unwrap();
        v.flush().unwrap();
    }
    let total = full.writes.load(Ordering::SeqCst);
    assert!(total >= 8, "the edit took {total} writes");
    let mut saw_log = false;
    for cut in 1..=total + 1 {
        let dev = Arc::new(Grow::new(base.clone(), Some(cut)));
        {
            let v = open_rw_on(Path::new("mem.vhdx"), dev.clone()).unwrap();
            let _ = v.write_at(&new, 5 * MIB);
            let _ = v.flush();
        }
        let crashed = dev.bytes();
        let ro = Arc::new(Grow::new(crashed.clone(), None));
        let r = open_vhdx(Path::new("mem.vhdx"), Box::new(ro.clone()), &no_opener)
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        saw_log |= r.replayed_entries() > 0;
        let mut got = vec![0u8; MIB as usize];
        r.read_at(&mut got, 5 * MIB).unwrap();
        assert!(
            got == new || got == old,
            "cut {cut}: neither old nor new data"
        );
        let mut b0 = vec![0u8; MIB as usize];
        r.read_at(&mut b0, 0).unwrap();
        assert!(b0 == pattern(MIB as usize, 0), "cut {cut}: block 0 lost");
        drop(r);
        assert!(
            ro.bytes() == crashed,
            "cut {cut}: a read-only open changed the file"
        );
        assert_eq!(
            ro.writes.load(Ordering::SeqCst),
            0,
            "cut {cut}: a read-only open wrote"
        );
        // Replayed for real.
        let dev2 = Arc::new(Grow::new(crashed, None));
        let w = open_rw_on(Path::new("mem.vhdx"), dev2.clone()).unwrap();
        let mut got2 = vec![0u8; MIB as usize];
        w.read_at(&mut got2, 5 * MIB).unwrap();
        assert!(
            got2 == got,
            "cut {cut}: the replay on the file reads otherwise"
        );
        drop(w);
        let after = dev2.bytes();
        let r2 = open_mem(after.clone()).unwrap();
        assert_eq!(
            r2.replayed_entries(),
            0,
            "cut {cut}: the log is not empty after replay"
        );
        if have_qemu() && cut % 3 == 0 {
            let p = tmp("cut.vhdx");
            std::fs::write(&p, &after).unwrap();
            let (ok, out) = qemu(&["check", p.to_str().unwrap()]);
            assert!(ok, "cut {cut}: qemu-img check: {out}");
        }
    }
    assert!(saw_log, "no cut left a log to replay");
}

/// A log entry written and not applied (the BAT entry in place never
/// written): read-only opens see the new block, qemu-img replays it too.
#[test]
fn pending_log_entry_is_seen() {
    let (_, base) = small_image(&[2]);
    let new = pattern(MIB as usize, 55);
    // Find the cut just before the BAT entry is written in place: the
    // last cut that still leaves a log entry.
    let mut pending = None;
    for cut in 1..40 {
        let dev = Arc::new(Grow::new(base.clone(), Some(cut)));
        {
            let v = open_rw_on(Path::new("mem.vhdx"), dev.clone()).unwrap();
            let _ = v.write_at(&new, 9 * MIB);
        }
        let b = dev.bytes();
        if pending.is_none() && open_mem(b.clone()).unwrap().replayed_entries() > 0 {
            pending = Some(b);
        }
    }
    let b = pending.expect("a cut leaving a pending log entry");
    // The BAT on the file does not point at the block: only the log does.
    let v = open_mem(b.clone()).unwrap();
    let mut got = vec![0u8; MIB as usize];
    v.read_at(&mut got, 9 * MIB).unwrap();
    assert!(got == new, "the replayed entry is not seen");
    if have_qemu() {
        let p = tmp("pending.vhdx");
        std::fs::write(&p, &b).unwrap();
        let ps = p.to_str().unwrap();
        // qemu-img refuses a dirty log read-only; -r all replays it.
        let (ok, out) = qemu(&["check", "-r", "all", ps]);
        assert!(ok, "qemu-img check -r all: {out}");
        let raw = tmp("pending.raw");
        let (ok, out) = qemu(&["convert", "-O", "raw", ps, raw.to_str().unwrap()]);
        assert!(ok, "{out}");
        let img = std::fs::read(&raw).unwrap();
        assert!(
            img[(9 * MIB) as usize..(10 * MIB) as usize] == new[..],
            "qemu-img does not see it"
        );
    }
}

/// Three blocks allocated between flushes make a sequence of three log
/// entries; cut before the flush empties the log, the sequence is replayed
/// whole, by us in memory and by qemu-img.
#[test]
fn log_sequence_of_entries() {
    let (_, base) = small_image(&[0]);
    let new: Vec<Vec<u8>> = (0..3).map(|k| pattern(MIB as usize, 60 + k)).collect();
    let write = |v: &Vhdx| {
        for (k, d) in new.iter().enumerate() {
            v.write_at(d, (4 + 3 * k as u64) * MIB).unwrap();
        }
    };
    // The writes up to the flush.
    let dev = Arc::new(Grow::new(base.clone(), None));
    let before_flush = {
        let v = open_rw_on(Path::new("mem.vhdx"), dev.clone()).unwrap();
        write(&v);
        let n = dev.writes.load(Ordering::SeqCst);
        v.flush().unwrap();
        n
    };
    // Cut at the flush's first header write.
    let dev = Arc::new(Grow::new(base, Some(before_flush + 1)));
    {
        let v = open_rw_on(Path::new("mem.vhdx"), dev.clone()).unwrap();
        write(&v);
        assert!(v.flush().is_err());
    }
    let b = dev.bytes();
    let v = open_mem(b.clone()).unwrap();
    assert_eq!(v.replayed_entries(), 3);
    for (k, d) in new.iter().enumerate() {
        let mut got = vec![0u8; MIB as usize];
        v.read_at(&mut got, (4 + 3 * k as u64) * MIB).unwrap();
        assert!(got == *d, "block {k} of the sequence");
    }
    if have_qemu() {
        let p = tmp("seq.vhdx");
        std::fs::write(&p, &b).unwrap();
        let ps = p.to_str().unwrap();
        let (ok, out) = qemu(&["check", "-r", "all", ps]);
        assert!(ok, "qemu-img check -r all: {out}");
        let raw = tmp("seq.raw");
        let (ok, out) = qemu(&["convert", "-O", "raw", ps, raw.to_str().unwrap()]);
        assert!(ok, "{out}");
        let img = std::fs::read(&raw).unwrap();
        for (k, d) in new.iter().enumerate() {
            let at = ((4 + 3 * k as u64) * MIB) as usize;
            assert!(img[at..at + MIB as usize] == d[..], "qemu-img: block {k}");
        }
    }
}

/// A file qemu-io wrote into (QEMU logs each BAT update and applies it at
/// once) reads back what it wrote.
#[test]
fn qemu_io_written_file_reads() {
    if !have_qemu() {
        println!("SKIP qemu_io_written_file_reads: no qemu-img");
        return;
    }
    // QEMU logs each BAT update and applies it at once; its file reads
    // back with what qemu-io wrote.
    let p = tmp("qlog.vhdx");
    let ps = p.to_str().unwrap();
    let (ok, out) = qemu(&["create", "-f", "vhdx", ps, "16M"]);
    assert!(ok, "{out}");
    let o = Command::new("qemu-io")
        .args(["-f", "vhdx", "-c", "write -P 0x5a 1M 64k", ps])
        .output();
    if !o.as_ref().is_ok_and(|o| o.status.success()) {
        println!("SKIP qemu_io_written_file_reads: qemu-io failed");
        return;
    }
    let v = open_vhdx(
        &p,
        Box::new(FileDevice::open_read_only(&p).unwrap()),
        &no_opener,
    )
    .unwrap();
    let mut got = vec![0u8; 65536];
    v.read_at(&mut got, MIB).unwrap();
    assert!(got.iter().all(|&x| x == 0x5a));
}

/// A differencing disk made by hand: a fully present block, a partially
/// present one (its sector bitmap choosing sector by sector) and blocks
/// from the parent.
#[test]
fn differencing_by_hand() {
    let dir = tmp("x").parent().unwrap().join("diff");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("base.vhdx");
    let child = dir.join("child.vhdx");
    let opts = CreateOptions {
        block: Some(MIB),
        ..Default::default()
    };
    let size = 8 * MIB;
    let b = create(&base, size, opts.clone()).unwrap();
    let pdata = pattern(size as usize, 3);
    b.write_at(&pdata, 0).unwrap();
    b.flush().unwrap();
    let linkage = guid_text(&b.data_write);
    drop(b);
    let c = create(
        &child,
        size,
        CreateOptions {
            parent: Some(vec![
                ("parent_linkage".into(), linkage.clone()),
                ("relative_path".into(), ".\\base.vhdx".into()),
                (
                    "absolute_win32_path".into(),
                    "C:\\nowhere\\base.vhdx".into(),
                ),
            ]),
            ..opts
        },
    )
    .unwrap();
    let bat_off = c.bat_offset;
    let cr = c.chunk_ratio;
    drop(c);
    // Block 1 fully present, block 3 partially (sectors 0..8 and 100 its
    // own), the sector bitmap after them.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(&child)
        .unwrap();
    let mut end = f.metadata().unwrap().len().div_ceil(MIB) * MIB;
    let own1 = pattern(MIB as usize, 11);
    let own3 = pattern(MIB as usize, 13);
    use std::os::unix::fs::FileExt;
    f.write_all_at(&own1, end).unwrap();
    f.write_all_at(&((end) | FULLY_PRESENT).to_le_bytes(), bat_off + 8)
        .unwrap();
    end += MIB;
    f.write_all_at(&own3, end).unwrap();
    f.write_all_at(&((end) | PARTIALLY_PRESENT).to_le_bytes(), bat_off + 24)
        .unwrap();
    end += MIB;
    let mut bm = vec![0u8; MIB as usize];
    let first = 3 * 2048; // sector number of block 3 within the chunk
    for s in (0..8).chain([100]) {
        let k = first + s;
        bm[k / 8] |= 1 << (k % 8);
    }
    f.write_all_at(&bm, end).unwrap();
    f.write_all_at(&(end | FULLY_PRESENT).to_le_bytes(), bat_off + 8 * cr)
        .unwrap();
    drop(f);
    let v = open_vhdx(
        &child,
        Box::new(FileDevice::open_read_only(&child).unwrap()),
        &crate::disk::container::local_opener,
    )
    .unwrap();
    assert!(v.has_parent());
    let mut got = vec![0u8; size as usize];
    v.read_at(&mut got, 0).unwrap();
    let mut want = pdata.clone();
    want[MIB as usize..2 * MIB as usize].copy_from_slice(&own1);
    let b3 = 3 * MIB as usize;
    for s in (0..8).chain([100]) {
        want[b3 + 512 * s..b3 + 512 * (s + 1)].copy_from_slice(&own3[512 * s..512 * (s + 1)]);
    }
    assert!(got == want, "differencing reads differ");
    // Odd-sized reads across the bitmap's choices.
    let mut piece = vec![0u8; 3000];
    v.read_at(&mut piece, 3 * MIB + 3000).unwrap();
    assert_eq!(&piece[..], &want[b3 + 3000..b3 + 6000]);
    // Writing is refused.
    assert!(matches!(open_rw(&child), Err(Error::Unsupported(_))));
    // A parent whose data write GUID is not the linkage is refused.
    let w = open_rw(&base).unwrap();
    w.write_at(&[1u8; 512], 0).unwrap();
    w.flush().unwrap();
    drop(w);
    let e = open_vhdx(
        &child,
        Box::new(FileDevice::open_read_only(&child).unwrap()),
        &crate::disk::container::local_opener,
    );
    assert!(e.is_err(), "a changed parent is accepted");
}

fn must_fail(bytes: Vec<u8>, what: &str) {
    match open_mem(bytes) {
        Ok(_) => panic!("{what}: opened"),
        Err(e) => println!("{what}: {e}"),
    }
}

/// Region table 1 (with the fix-up of its checksum and of the copy).
fn edit_regions(b: &mut [u8], f: impl Fn(&mut [u8])) {
    for &off in &REGION_OFFSETS {
        let t = &mut b[off as usize..off as usize + 65536];
        f(t);
        set_crc(t, 4);
    }
}

#[test]
fn damaged_files_give_errors() {
    let (_, good) = small_image(&[0, 3]);
    assert!(open_mem(good.clone()).is_ok());
    // Truncated: the header section, a BAT block.
    must_fail(good[..100_000].to_vec(), "truncated to 100000 bytes");
    must_fail(good[..(MIB as usize)].to_vec(), "truncated to 1 MiB");
    let mut b = good.clone();
    b.truncate(b.len() - MIB as usize / 2);
    must_fail(b, "last block cut");
    // A bad CRC in the current header: the other is used.
    let mut b = good.clone();
    b[HEADER_OFFSETS[1] as usize + 200] ^= 1;
    assert!(open_mem(b.clone()).is_ok(), "the other header is not used");
    b[HEADER_OFFSETS[0] as usize + 200] ^= 1;
    must_fail(b, "both headers bad");
    // No signature.
    let mut b = good.clone();
    b[0] = b'x';
    must_fail(b, "no vhdxfile");
    // One region table bad: the copy is used; both: error.
    let mut b = good.clone();
    b[REGION_OFFSETS[0] as usize + 100] ^= 1;
    assert!(
        open_mem(b.clone()).is_ok(),
        "the region table copy is not used"
    );
    b[REGION_OFFSETS[1] as usize + 100] ^= 1;
    must_fail(b, "both region tables bad");
    // Huge regions, entry counts.
    let mut b = good.clone();
    edit_regions(&mut b, |t| put_le32(t, 16 + 24, 0xfff0_0000));
    must_fail(b, "a 4 GiB BAT region");
    let mut b = good.clone();
    edit_regions(&mut b, |t| put_le64(t, 16 + 16, 1 << 62));
    must_fail(b, "a BAT region far past the end");
    let mut b = good.clone();
    edit_regions(&mut b, |t| put_le32(t, 8, 100_000));
    must_fail(b, "100000 region entries");
    // The BAT and metadata regions overlapping.
    let mut b = good.clone();
    edit_regions(&mut b, |t| {
        let bat = u64::from_le_bytes(t[32..40].try_into().unwrap());
        put_le64(t, 48 + 16, bat);
    });
    must_fail(b, "overlapping regions");
    // Metadata: huge count, an item outside the region, a huge size.
    let v = open_mem(good.clone()).unwrap();
    let bat_off = v.bat_offset as usize;
    drop(v);
    let meta_off = bat_off + MIB as usize;
    let mut b = good.clone();
    b[meta_off + 10..meta_off + 12].copy_from_slice(&60000u16.to_le_bytes());
    must_fail(b, "60000 metadata entries");
    let mut b = good.clone();
    put_le32(&mut b, meta_off + 32 + 16, 0xffff_0000);
    must_fail(b, "file parameters far outside the region");
    let mut b = good.clone();
    // Item 1 is the virtual size, at 64 KiB + 8.
    put_le64(&mut b, meta_off + 65536 + 8, 1 << 50);
    must_fail(b, "a petabyte disk with a small BAT");
    let mut b = good.clone();
    put_le32(&mut b, meta_off + 65536, 3 << 20);
    must_fail(b, "a 3 MiB block size");
    // A BAT entry past the end of the file, one in the header section, a
    // bad state.
    let mut b = good.clone();
    put_le64(&mut b, bat_off + 8 * 5, (1 << 40) | FULLY_PRESENT);
    must_fail(b, "a block past the end");
    let mut b = good.clone();
    put_le64(&mut b, bat_off + 8 * 5, FULLY_PRESENT);
    must_fail(b, "a block in the header section");
    let mut b = good.clone();
    put_le64(&mut b, bat_off + 8 * 5, 4);
    must_fail(b, "state 4");
    let mut b = good.clone();
    put_le64(&mut b, bat_off + 8 * 5, (3 * MIB) | PARTIALLY_PRESENT);
    must_fail(b, "partially present without a parent");
}

/// Logs that are damaged: garbage under a set log GUID reads as no log,
/// an entry whose tail is not valid is an error, a log past the end or of
/// an odd size is an error, a log claiming a longer file is an error.
#[test]
fn damaged_logs() {
    let (_, good) = small_image(&[0]);
    let with_log = |b: &mut Vec<u8>, len: u32, off: u64| {
        for &h in &HEADER_OFFSETS {
            let s = &mut b[h as usize..h as usize + 4096];
            s[48..64].copy_from_slice(&[7u8; 16]);
            put_le32(s, 68, len);
            put_le64(s, 72, off);
            set_crc(s, 4);
        }
    };
    // Garbage (the file's zeros) under a log GUID: nothing to replay.
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, MIB);
    assert_eq!(open_mem(b).unwrap().replayed_entries(), 0);
    let mut b = good.clone();
    with_log(&mut b, 12345, MIB);
    must_fail(b, "a log of 12345 bytes");
    let mut b = good.clone();
    with_log(&mut b, 0x7ff0_0000, MIB);
    must_fail(b, "a log past the end");
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, 0);
    must_fail(b, "a log in the header section");
    // A valid entry whose tail names garbage.
    let v = open_mem(good.clone()).unwrap();
    let bat_off = v.bat_offset;
    drop(v);
    let sector = vec![0u8; 4096];
    let e = log::encode_entry([7u8; 16], 5, 8192, good.len() as u64, &[(bat_off, &sector)]);
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, MIB);
    b[MIB as usize..MIB as usize + e.len()].copy_from_slice(&e);
    must_fail(b, "a tail naming garbage");
    // A valid entry claiming the file was flushed longer than it is.
    let e = log::encode_entry(
        [7u8; 16],
        5,
        0,
        good.len() as u64 + MIB,
        &[(bat_off, &sector)],
    );
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, MIB);
    b[MIB as usize..MIB as usize + e.len()].copy_from_slice(&e);
    must_fail(b, "a log of a longer file");
    // An entry writing into the header section is not valid: no log.
    let e = log::encode_entry([7u8; 16], 5, 0, good.len() as u64, &[(4096, &sector)]);
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, MIB);
    b[MIB as usize..MIB as usize + e.len()].copy_from_slice(&e);
    assert_eq!(open_mem(b).unwrap().replayed_entries(), 0);
    // A log full of forged headers with bad checksums ends.
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, MIB);
    let mut forged = e.clone();
    forged[4] ^= 1;
    put_le32(&mut forged, 8, MIB as u32);
    for k in 0..256usize {
        let at = MIB as usize + 4096 * k;
        b[at..at + 64].copy_from_slice(&forged[..64]);
    }
    let _ = open_mem(b);
    // A valid entry zeroing the BAT is replayed: the block reads as zeros.
    let e = log::encode_entry([7u8; 16], 1, 0, good.len() as u64, &[(bat_off, &sector)]);
    let mut b = good.clone();
    with_log(&mut b, MIB as u32, MIB);
    b[MIB as usize..MIB as usize + e.len()].copy_from_slice(&e);
    let v = open_mem(b.clone()).unwrap();
    assert_eq!(v.replayed_entries(), 1);
    let mut got = vec![1u8; 512];
    v.read_at(&mut got, 0).unwrap();
    assert!(got.iter().all(|&x| x == 0));
}

#[test]
fn probe_and_sizes() {
    assert!(probe(b"vhdxfile\0\0"));
    assert!(!probe(b"vhdxfil"));
    assert!(!probe(b"conectix"));
    assert_eq!(disk_size(1), 512);
    assert_eq!(disk_size(1024), 1024);
    assert_eq!(
        guid_text(&header::BAT_GUID),
        "{2DC27766-F623-4200-9D64-115E9BFD4A08}"
    );
}

/// Random damage to the structures of a file (a pending log entry among
/// them): every open and read ends in a result, never a panic, and reads
/// stay inside the file.
#[test]
fn random_damage_never_panics() {
    let (_, base) = small_image(&[0, 5]);
    // A pending log entry: the write cut right after its entry is written.
    let mut pending = base.clone();
    for cut in 1..40 {
        let dev = Arc::new(Grow::new(base.clone(), Some(cut)));
        {
            let v = open_rw_on(Path::new("mem.vhdx"), dev.clone()).unwrap();
            let _ = v.write_at(&pattern(MIB as usize, 4), 9 * MIB);
        }
        let b = dev.bytes();
        if open_mem(b.clone()).unwrap().replayed_entries() > 0 {
            pending = b;
            break;
        }
    }
    assert!(open_mem(pending.clone()).unwrap().replayed_entries() > 0);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Where the structures are: headers, region tables, log, BAT, metadata.
    let spans = [
        (0u64, 4096u64),
        (64 << 10, 4096),
        (128 << 10, 4096),
        (192 << 10, 256),
        (MIB, 3 * 4096),
        (2 * MIB, 4096),
        (3 * MIB, 65536 + 4096),
    ];
    let mut opened = 0;
    for i in 0..2000 {
        let mut b = if i % 2 == 0 {
            base.clone()
        } else {
            pending.clone()
        };
        for _ in 0..1 + next() % 4 {
            let (lo, n) = spans[(next() % spans.len() as u64) as usize];
            let at = (lo + next() % n) as usize;
            b[at] ^= 1 << (next() % 8);
        }
        // Fix the checksums now and then, so that damage gets past them.
        if next() % 3 == 0 {
            for &h in &HEADER_OFFSETS {
                set_crc(&mut b[h as usize..h as usize + 4096], 4);
            }
            for &r in &REGION_OFFSETS {
                set_crc(&mut b[r as usize..r as usize + 65536], 4);
            }
        }
        if let Ok(v) = open_mem(b) {
            opened += 1;
            let mut buf = vec![0u8; 4 * MIB as usize];
            let _ = v.read_at(&mut buf, 0);
            let _ = v.read_at(&mut buf[..4096], 9 * MIB);
        }
    }
    println!("{opened} of 2000 damaged files opened");
}

/// 4096-byte logical sectors (a chunk ratio of 32768 with 1 MiB blocks):
/// written and read back, in place after a reopen too.
#[test]
fn logical_sectors_of_4096() {
    let p = tmp("4k.vhdx");
    let v = create(
        &p,
        12 * MIB,
        CreateOptions {
            block: Some(MIB),
            sector: 4096,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(v.logical_sector_size(), 4096);
    assert_eq!(v.chunk_ratio, 32768);
    let a = pattern(2 * MIB as usize + 8192, 21);
    v.write_at(&a, 3 * MIB - 4096).unwrap();
    v.flush().unwrap();
    drop(v);
    let w = open_rw(&p).unwrap();
    w.write_at(&a[..4096], 11 * MIB).unwrap();
    w.flush().unwrap();
    drop(w);
    let r = open_vhdx(
        &p,
        Box::new(FileDevice::open_read_only(&p).unwrap()),
        &no_opener,
    )
    .unwrap();
    let mut got = vec![0u8; a.len()];
    r.read_at(&mut got, 3 * MIB - 4096).unwrap();
    assert!(got == a);
    r.read_at(&mut got[..4096], 11 * MIB).unwrap();
    assert!(got[..4096] == a[..4096]);
    assert_eq!(r.physical_sector_size(), 4096);
}
