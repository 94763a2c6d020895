//! Fuzz target: byte patches over the metadata of a real image, then open
//! the filesystem and read everything reachable. Any panic, hang or huge
//! allocation is a bug; errors are the expected outcome.
//!
//! Input: 5-byte patches (region index u16, offset in region u16, value u8)
//! applied to a golden fixture (XFSKIT_FUZZ_IMAGE, an uncompressed image).
//! Regions are the AG 0 headers, the inodes and the metadata blocks of the
//! first few hundred inodes reached from the root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::sync::{Arc, OnceLock};
use xfskit::dev::Device;
use xfskit::inode::{extents, FileReader, FileType, Fork};
use xfskit::{Fs, Ino, OpenOptions};

const MAX_INODES: usize = 400;

struct Base {
    image: Arc<Vec<u8>>,
    regions: Vec<(u64, u32)>,
}

struct Patched {
    image: Arc<Vec<u8>>,
    patches: BTreeMap<u64, u8>,
}

impl Device for Patched {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let end = off.checked_add(buf.len() as u64).filter(|&e| e <= self.image.len() as u64);
        let Some(end) = end else { return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past end")) };
        buf.copy_from_slice(&self.image[off as usize..end as usize]);
        for (&o, &b) in self.patches.range(off..end) {
            buf[(o - off) as usize] = b;
        }
        Ok(())
    }
    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::PermissionDenied, "read-only"))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.image.len() as u64
    }
}

fn open(image: Arc<Vec<u8>>, patches: BTreeMap<u64, u8>) -> xfskit::Result<Fs> {
    Fs::from_device(Box::new(Patched { image, patches }), &OpenOptions { norecovery: true, cache_bytes: 8 << 20, ..Default::default() })
}

/// Reads everything reachable from the root, up to MAX_INODES inodes;
/// `visit` sees each inode's metadata regions.
fn walk(fs: &Fs, mut visit: impl FnMut(u64, u32)) -> xfskit::Result<()> {
    let geo = fs.geometry().clone();
    let mut seen = HashSet::new();
    let mut queue = std::collections::VecDeque::from([geo.root_ino]);
    let mut buf = vec![0u8; 256 << 10];
    while let Some(ino) = queue.pop_front() {
        if seen.len() >= MAX_INODES || !seen.insert(ino) {
            continue;
        }
        visit(geo.ino_to_bytes(ino), geo.inode_size);
        let inode = fs.inode(ino)?;
        let _ = xfskit::attr::list(fs, &inode)?;
        if inode.has_attr_fork() {
            for e in extents(fs, &inode, Fork::Attr)?.iter().take(4) {
                visit(geo.fsb_to_daddr(e.start).bytes(), geo.block_size);
            }
        }
        match inode.file_type {
            FileType::Dir => {
                for e in extents(fs, &inode, Fork::Data)?.iter().take(8) {
                    visit(geo.fsb_to_daddr(e.start).bytes(), geo.block_size);
                }
                for e in xfskit::dir::read_dir(fs, &inode)? {
                    let _: Ino = e.ino;
                    queue.push_back(e.ino);
                }
            }
            FileType::File => {
                let r = FileReader::new(fs, &inode)?;
                // Read the first and last chunk: the mapping is what matters.
                r.read_at(0, &mut buf)?;
                r.read_at(r.size().saturating_sub(buf.len() as u64), &mut buf)?;
            }
            FileType::Symlink => {
                xfskit::symlink::read_link(fs, &inode)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = std::env::var("XFSKIT_FUZZ_IMAGE").expect("set XFSKIT_FUZZ_IMAGE to an uncompressed fixture image");
        let image = Arc::new(std::fs::read(&path).expect("read fuzz image"));
        let fs = open(image.clone(), BTreeMap::new()).expect("the base image must open");
        let mut regions = vec![(0, 512), (512, 512), (1024, 512), (1536, 512)];
        walk(&fs, |off, len| regions.push((off, len))).expect("the base image must walk cleanly");
        Base { image, regions }
    })
}

fuzz_target!(|data: &[u8]| {
    let b = base();
    let mut patches = BTreeMap::new();
    for c in data.chunks_exact(5) {
        let (off, len) = b.regions[usize::from(u16::from_le_bytes([c[0], c[1]])) % b.regions.len()];
        let at = u64::from(u16::from_le_bytes([c[2], c[3]])) % u64::from(len);
        patches.insert(off + at, c[4]);
    }
    if let Ok(fs) = open(b.image.clone(), patches) {
        let _ = walk(&fs, |_, _| {});
    }
});
