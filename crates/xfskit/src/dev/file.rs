//! A device backed by an image file or a block device.

use super::Device;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// An image file or block device, read and written with pread/pwrite.
pub struct FileDevice {
    file: File,
    len: u64,
    writable: bool,
    /// Set after a failed write: further writes are refused.
    poisoned: AtomicBool,
    /// A second handle with `O_DIRECT`, for large aligned writes (see
    /// [`FileDevice::write_direct`]); None when the file refuses it.
    direct: Option<Direct>,
}

/// Large aligned writes bypass the page cache: the bytes are copied once
/// into an aligned buffer and go to the disk from there, instead of being
/// copied into the page cache and written again by the kernel's flusher.
struct Direct {
    file: File,
    /// Aligned staging memory (allocated with room to align).
    stage: std::sync::Mutex<Vec<u8>>,
    /// False once the kernel refused a direct write: back to buffered.
    on: AtomicBool,
}

/// Alignment of offsets, lengths and memory of direct writes.
const DIRECT_ALIGN: usize = 4096;
/// Writes shorter than this stay buffered.
const DIRECT_MIN: usize = 64 << 10;

impl FileDevice {
    /// Opens `path` read-only.
    pub fn open_read_only(path: &Path) -> io::Result<FileDevice> {
        let file = File::open(path)?;
        Self::from_file(file, false)
    }

    /// Opens `path` for reading and writing.
    pub fn open_read_write(path: &Path) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        lock_for_writing(&file, path)?;
        let mut dev = Self::from_file(file, true)?;
        if std::env::var_os("XFSKIT_NO_DIRECT").is_none() {
            use std::os::unix::fs::OpenOptionsExt;
            dev.direct = OpenOptions::new()
                .write(true)
                .custom_flags(libc_o_direct())
                .open(path)
                .ok()
                .map(|file| Direct {
                    file,
                    stage: std::sync::Mutex::new(Vec::new()),
                    on: AtomicBool::new(true),
                });
        }
        Ok(dev)
    }

    fn from_file(file: File, writable: bool) -> io::Result<FileDevice> {
        let meta = file.metadata()?;
        let len = if meta.file_type().is_block_device() {
            block_device_len(&file)?
        } else {
            meta.len()
        };
        Ok(FileDevice {
            file,
            len,
            writable,
            poisoned: AtomicBool::new(false),
            direct: None,
        })
    }

    /// The underlying file, for operations such as hole punching.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// The `O_DIRECT` open flag.
fn libc_o_direct() -> i32 {
    rustix::fs::OFlags::DIRECT.bits() as i32
}

impl FileDevice {
    /// Writes `bufs` at `off` through the direct handle when the write is
    /// large and aligned; None when it must go through the page cache.
    /// Pieces already aligned in memory and length (file data in
    /// [`crate::dev::AlignedBuf`]s) go to the disk from where they are; the
    /// others (metadata) are copied into aligned staging memory first,
    /// runs of them next to each other.
    fn write_direct(&self, bufs: &[&[u8]], off: u64) -> Option<io::Result<()>> {
        let d = self.direct.as_ref()?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if !d.on.load(Ordering::Relaxed)
            || total < DIRECT_MIN
            || !total.is_multiple_of(DIRECT_ALIGN)
            || !off.is_multiple_of(DIRECT_ALIGN as u64)
        {
            return None;
        }
        // Only 4 KiB-aligned pieces are written in place. Most disks would
        // take 512-byte-aligned memory, but each 4 KiB piece then spans two
        // pages: 400 MiB in such pieces took 0.70-0.85 s here against
        // 0.36-0.47 s page-aligned.
        let in_place = |b: &[u8]| {
            b.as_ptr().addr().is_multiple_of(DIRECT_ALIGN) && b.len().is_multiple_of(DIRECT_ALIGN)
        };
        // Copied runs sit between in-place pieces, whose lengths are whole
        // alignment units, and the write's start and length are aligned:
        // so every copied run is a whole number of units too.
        let copied: usize = bufs.iter().filter(|b| !in_place(b)).map(|b| b.len()).sum();
        let mut stage = d.stage.lock().unwrap_or_else(|p| p.into_inner());
        if stage.len() < copied + DIRECT_ALIGN {
            stage.resize(copied + DIRECT_ALIGN, 0);
        }
        let skip = stage.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        // Each piece: Ok(in-place index) or Err(staged byte range).
        let mut plan: Vec<std::result::Result<usize, (usize, usize)>> = Vec::new();
        let mut at = skip;
        for (i, b) in bufs.iter().enumerate() {
            if in_place(b) {
                plan.push(Ok(i));
                continue;
            }
            stage[at..at + b.len()].copy_from_slice(b);
            match plan.last_mut() {
                Some(Err((_, end))) if *end == at => *end = at + b.len(),
                _ => plan.push(Err((at, at + b.len()))),
            }
            at += b.len();
        }
        let parts: Vec<&[u8]> = plan
            .iter()
            .map(|p| match *p {
                Ok(i) => bufs[i],
                Err((a, b)) => &stage[a..b],
            })
            .collect();
        match pwritev_all(&d.file, &parts, off) {
            Err(e) if e.raw_os_error() == Some(22) => {
                // EINVAL: this file takes no direct writes after all.
                d.on.store(false, Ordering::Relaxed);
                None
            }
            r => Some(r.map(|_| ())),
        }
    }
}

impl FileDevice {
    /// Writes `bufs` at `off`: the part between the first and the last
    /// piece boundary on an alignment boundary directly (when it is large
    /// enough), the pieces before and after it (inodes of a cluster
    /// written from its middle) through the page cache.
    fn write_split(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        let a = DIRECT_ALIGN as u64;
        let mut first = None;
        let mut last = 0;
        let mut pos = off;
        for (i, b) in bufs.iter().enumerate() {
            if pos.is_multiple_of(a) {
                first.get_or_insert(i);
                last = i;
            }
            pos += b.len() as u64;
        }
        if pos.is_multiple_of(a) {
            first.get_or_insert(bufs.len());
            last = bufs.len();
        }
        let Some(i0) = first.filter(|&i| i < last && self.direct.is_some()) else {
            return pwritev_all(&self.file, bufs, off).map(|_| ());
        };
        let head: u64 = bufs[..i0].iter().map(|b| b.len() as u64).sum();
        let mid = &bufs[i0..last];
        let mid_len: u64 = mid.iter().map(|b| b.len() as u64).sum();
        match self.write_direct(mid, off + head) {
            Some(r) => r?,
            None => return pwritev_all(&self.file, bufs, off).map(|_| ()),
        }
        if i0 > 0 {
            pwritev_all(&self.file, &bufs[..i0], off)?;
        }
        if last < bufs.len() {
            pwritev_all(&self.file, &bufs[last..], off + head + mid_len)?;
        }
        Ok(())
    }
}

/// Takes the one writer's lock on an image opened for writing (an
/// exclusive `flock`, released when the file is closed, also by a crash):
/// two writers of one image (two read-write mounts, an edit beside a
/// mount) would each keep their own allocation state and journal, and
/// corrupt it. A second writer in another process is refused at once,
/// naming the image. Readers take no lock.
///
/// A lock this process took is waited for, a few seconds at most: a
/// child this process is starting holds a copy of every descriptor
/// until it runs its program (the copy closes then, being close-on-exec),
/// and with it the lock of an image this process has just closed. The
/// copy may close between the refused lock and the look at /proc/locks:
/// a lock no longer listed is tried again too.
#[allow(unsafe_code)]
pub(crate) fn lock_for_writing(file: &File, path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    const WAIT: std::time::Duration = std::time::Duration::from_secs(5);
    let mut waited = None;
    loop {
        // SAFETY: flock on a descriptor this function borrows open.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // A filesystem without flock (some network ones): no lock to take.
        if e.raw_os_error() == Some(libc::ENOLCK) || e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            return Ok(());
        }
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e);
        }
        // Another process's lock is refused at once. This process's, or
        // none listed any more (the child that held it has just run its
        // program, closing the copy), is tried again.
        let holder = file.metadata().ok().and_then(|m| {
            let locks = std::fs::read_to_string("/proc/locks").ok()?;
            flock_holder(&locks, m.dev(), m.ino())
        });
        let other = holder.is_some_and(|pid| pid != std::process::id());
        let start = *waited.get_or_insert_with(std::time::Instant::now);
        if other || start.elapsed() >= WAIT {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "{} is open for writing by another process (an xfskit mount, edit or build holds it): one writer at a time",
                    path.display()
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The process that holds the `flock` of the file `(dev, ino)`, from the
/// text of /proc/locks (lines such as `1: FLOCK  ADVISORY  WRITE 2224
/// fe:00:9977992 0 EOF`, the device as hexadecimal major:minor).
fn flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|l| {
        // Locks being waited for are listed as "1: -> FLOCK ...": their
        // second field is not the lock's type, so they are passed over.
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") || f.get(5) != Some(&want.as_str()) {
            return None;
        }
        f.get(4)?.parse().ok()
    })
}

fn block_device_len(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::End(0))
}

impl FileDevice {
    fn check_read(&self, len: usize, off: u64) -> io::Result<()> {
        if off.checked_add(len as u64).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {len} bytes at offset {off} is past the end of the device ({} bytes)",
                    self.len
                ),
            ));
        }
        Ok(())
    }
}

impl Device for FileDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.check_read(buf.len(), off)?;
        self.file.read_exact_at(buf, off)
    }

    fn read_uninit_at(&self, buf: &mut [std::mem::MaybeUninit<u8>], off: u64) -> io::Result<()> {
        self.check_read(buf.len(), off)?;
        let mut rest = buf;
        let mut pos = off;
        while !rest.is_empty() {
            match rustix::io::pread(&self.file, &mut *rest, pos) {
                Ok(([], _)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the file ends before byte {pos}"),
                    ))
                }
                Ok((got, _)) => {
                    let n = got.len();
                    pos += n as u64;
                    rest = &mut rest[n..];
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if !self.writable || self.poisoned.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device is not writable",
            ));
        }
        let r = self.file.write_all_at(buf, off);
        if r.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        if !self.writable || self.poisoned.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device is not writable",
            ));
        }
        let r = self.write_split(bufs, off);
        if r.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    fn flush(&self) -> io::Result<()> {
        if self.writable {
            self.file.sync_all()?;
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn will_need(&self, off: u64, len: u64) {
        // Only a hint: its failure changes nothing.
        let _ = rustix::fs::fadvise(
            &self.file,
            off,
            std::num::NonZeroU64::new(len),
            rustix::fs::Advice::WillNeed,
        );
    }
}

/// Most buffers handed to one `pwritev` (the kernel's IOV_MAX).
const MAX_IOVECS: usize = 1024;

/// Writes all of `bufs` (contiguous on disk) from `off`, with as few
/// `pwritev` calls as the iovec limit and short writes allow. Returns the
/// number of calls made.
pub(crate) fn pwritev_all(file: &File, bufs: &[&[u8]], off: u64) -> io::Result<u64> {
    use std::io::IoSlice;
    let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    let mut pos = off;
    let mut first = 0;
    let mut calls = 0u64;
    while first < slices.len() {
        let end = (first + MAX_IOVECS).min(slices.len());
        calls += 1;
        let n = rustix::io::pwritev(file, &slices[first..end], pos)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
        }
        pos += n as u64;
        let mut left = n;
        while left > 0 && first < slices.len() {
            let len = slices[first].len();
            if left >= len {
                left -= len;
                first += 1;
            } else {
                let whole = bufs[first];
                slices[first] = IoSlice::new(&whole[whole.len() - len + left..]);
                left = 0;
            }
        }
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    #[test]
    fn flock_holder_reads_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 2224 fe:00:9977992 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 2300 fe:00:9977992 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 17 fe:00:55 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 99 103:0a:55 0 EOF\n";
        let dev = |ma, mi| libc::makedev(ma, mi);
        assert_eq!(flock_holder(locks, dev(0xfe, 0), 9977992), Some(2224));
        assert_eq!(flock_holder(locks, dev(0x103, 0x0a), 55), Some(99));
        assert_eq!(flock_holder(locks, dev(0xfe, 0), 55), None);
        assert_eq!(flock_holder(locks, dev(0xfe, 1), 9977992), None);
    }

    /// A child holding a copy of the descriptor of an image this process
    /// wrote (as one being started does until it runs its program) holds
    /// its lock: opening the image for writing again waits for the child
    /// instead of calling it another writer. Another process's lock is
    /// refused.
    #[test]
    fn own_lock_in_a_child_is_waited_for_another_process_refused() {
        let path = std::env::temp_dir().join(format!("xfskit-lock-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let dev = FileDevice::open_read_write(&path).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .stdin(std::process::Stdio::from(dev.file.try_clone().unwrap()))
            .spawn()
            .unwrap();
        drop(dev);
        let again = FileDevice::open_read_write(&path);
        child.wait().unwrap();
        assert!(again.is_ok(), "{:?}", again.err());
        drop(again);
        // Another process takes the lock and keeps it until its stdin
        // closes.
        let mut other = std::process::Command::new("flock")
            .arg("-x")
            .arg(&path)
            .args(["cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let held = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            let locks = std::fs::read_to_string("/proc/locks").unwrap();
            use std::os::unix::fs::MetadataExt;
            flock_holder(&locks, m.dev(), m.ino()).is_some()
        };
        while !held(&path) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let e = FileDevice::open_read_write(&path)
            .err()
            .expect("a second writer");
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
        assert!(e.to_string().contains("one writer at a time"), "{e}");
        drop(other.stdin.take());
        other.wait().unwrap();
        assert!(FileDevice::open_read_write(&path).is_ok());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    #[allow(unsafe_code)]
    fn reads_into_new_memory_as_into_bytes() {
        let path = std::env::temp_dir().join(format!("xfskit-uninit-{}", std::process::id()));
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let dev = FileDevice::open_read_only(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        for (off, len) in [
            (0usize, 20_000usize),
            (1, 4095),
            (12_345, 7_655),
            (19_999, 1),
        ] {
            let mut a = vec![MaybeUninit::<u8>::uninit(); len];
            dev.read_uninit_at(&mut a, off as u64).unwrap();
            // SAFETY: read_uninit_at succeeded, so it wrote every byte.
            let a: Vec<u8> = a.iter().map(|x| unsafe { x.assume_init() }).collect();
            assert_eq!(a, data[off..off + len]);
        }
        let mut past = vec![MaybeUninit::<u8>::uninit(); 2];
        let e = dev.read_uninit_at(&mut past, 19_999).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let mut z = vec![MaybeUninit::<u8>::uninit(); 9];
        assert_eq!(crate::sys::zeroed(&mut z), &[0u8; 9]);
    }
}
