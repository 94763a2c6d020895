//! Writing a streamOptimized VMDK once: the header and descriptor first,
//! then compressed grains, each behind its grain marker, appended as they
//! leave a bounded buffer; at the end ([`Stream::finish`]) the grain
//! tables, the grain directory, the footer (the header again, with the
//! directory's offset) and the end-of-stream marker.
//!
//! The build engine writes blocks in any order and sometimes writes one
//! again (the superblock, last): grains stay in memory until the buffer is
//! full, then the least recently written go out. A grain written again
//! after it went out is read back, changed, and appended anew when it
//! leaves the buffer again; the old copy is left unreferenced (a reader
//! consuming the stream in order sees the newer copy last). Grains of
//! zeros that never went out are not stored.

use super::descriptor;
use super::header::{
    self, Header, COMPRESS_DEFLATE, FLAG_COMPRESSED, FLAG_MARKERS, FLAG_NL_TEST, GD_AT_END,
    MARKER_EOS, MARKER_FOOTER, MARKER_GD, MARKER_GT, SECTOR,
};
use super::sparse::inflate_into;
use crate::dev::Device;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub(super) const GRAIN_SECTORS: u64 = 128;
const GRAIN: u64 = GRAIN_SECTORS * SECTOR;
const GTES: u64 = 512;
/// Grains kept in memory (64 KiB each): 32 MiB.
const BUFFER_GRAINS: usize = 512;
/// Grains read back kept inflated.
const INFLATED_CACHE: usize = 8;

struct Pending {
    data: Vec<u8>,
    touched: u64,
}

struct State {
    file: File,
    /// The next byte to append (sector-aligned).
    end: u64,
    header: Header,
    buffer: HashMap<u64, Pending>,
    tick: u64,
    /// Grain -> sector of its newest marker in the file.
    out: HashMap<u64, u32>,
    inflated: Vec<(u64, Arc<[u8]>)>,
    finished: bool,
    /// A write failed: the file is incomplete, finish refuses.
    failed: bool,
}

/// A streamOptimized VMDK being written.
pub(super) struct Stream {
    path: PathBuf,
    capacity: u64,
    state: Mutex<State>,
}

/// The device of a [`Stream`] (shared with its finish step).
pub(super) struct StreamDisk(pub Arc<Stream>);

impl Stream {
    /// Creates `path` (which must not exist) for a disk of `bytes`.
    pub fn create(path: &Path, bytes: u64) -> Result<Stream> {
        let sectors = bytes / SECTOR;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let desc = descriptor::render(
            "streamOptimized",
            super::cid_for(sectors, &name),
            sectors,
            &name,
        );
        let desc_sectors = (desc.len() as u64).div_ceil(SECTOR);
        let overhead = (1 + desc_sectors).div_ceil(GRAIN_SECTORS) * GRAIN_SECTORS;
        let header = Header {
            version: 3,
            flags: FLAG_NL_TEST | FLAG_COMPRESSED | FLAG_MARKERS,
            capacity: sectors,
            grain: GRAIN_SECTORS,
            desc_offset: 1,
            desc_size: desc_sectors,
            gtes: GTES as u32,
            rgd_offset: 0,
            gd_offset: GD_AT_END,
            overhead,
            unclean: 0,
            compress: COMPRESS_DEFLATE,
        };
        let file = super::create_file(path)?;
        file.write_all_at(&header.to_sector(), 0)?;
        file.write_all_at(desc.as_bytes(), SECTOR)?;
        file.set_len(overhead * SECTOR)?;
        Ok(Stream {
            path: path.to_path_buf(),
            capacity: bytes,
            state: Mutex::new(State {
                file,
                end: overhead * SECTOR,
                header,
                buffer: HashMap::new(),
                tick: 0,
                out: HashMap::new(),
                inflated: Vec::new(),
                finished: false,
                failed: false,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(&self, off: u64, n: usize, what: &str) -> io::Result<()> {
        crate::disk::inside(what, "VMDK", self.capacity, off, n)?;
        Ok(())
    }

    /// Writes the remaining grains, the tables, the directory, the footer
    /// and the end-of-stream marker, and syncs the file.
    pub fn finish(&self) -> Result<()> {
        let mut s = self.lock();
        if s.failed {
            return Err(Error::Invalid(format!(
                "{}: an earlier write failed, the VMDK is incomplete",
                self.path.display()
            )));
        }
        if s.finished {
            return Ok(());
        }
        let all: Vec<u64> = s.buffer.keys().copied().collect();
        self.evict(&mut s, all)?;
        let grains = s.header.capacity.div_ceil(GRAIN_SECTORS);
        let gt_count = grains.div_ceil(GTES) as usize;
        let mut gd = vec![0u32; gt_count];
        let mut tables: Vec<Vec<u32>> = vec![Vec::new(); gt_count];
        for (&g, &sec) in &s.out {
            let t = &mut tables[(g / GTES) as usize];
            if t.is_empty() {
                t.resize(GTES as usize, 0);
            }
            t[(g % GTES) as usize] = sec;
        }
        let mut tail: Vec<u8> = Vec::new();
        let base = s.end;
        for (gi, t) in tables.iter().enumerate() {
            if t.is_empty() {
                continue;
            }
            tail.extend_from_slice(&header::marker(GTES * 4 / SECTOR, MARKER_GT));
            gd[gi] = sector_of(base + tail.len() as u64)?;
            tail.extend(t.iter().flat_map(|e| e.to_le_bytes()));
        }
        let gd_sectors = (gt_count as u64 * 4).div_ceil(SECTOR);
        tail.extend_from_slice(&header::marker(gd_sectors, MARKER_GD));
        let gd_sector = sector_of(base + tail.len() as u64)?;
        tail.extend(gd.iter().flat_map(|e| e.to_le_bytes()));
        tail.resize(tail.len().div_ceil(512) * 512, 0);
        tail.extend_from_slice(&header::marker(1, MARKER_FOOTER));
        let mut footer = s.header.clone();
        footer.gd_offset = u64::from(gd_sector);
        tail.extend_from_slice(&footer.to_sector());
        tail.extend_from_slice(&header::marker(0, MARKER_EOS));
        let r = (|| {
            s.file.write_all_at(&tail, base)?;
            s.file.set_len(base + tail.len() as u64)?;
            s.file.sync_all()
        })();
        if let Err(e) = r {
            s.failed = true;
            return Err(e.into());
        }
        s.end = base + tail.len() as u64;
        s.finished = true;
        s.buffer.clear();
        Ok(())
    }

    /// Compresses and appends the grains `gs` (taken out of the buffer),
    /// in disk order.
    fn evict(&self, s: &mut State, mut gs: Vec<u64>) -> io::Result<()> {
        gs.sort_unstable();
        let mut batch: Vec<(u64, Vec<u8>)> = Vec::with_capacity(gs.len());
        for g in gs {
            let Some(p) = s.buffer.remove(&g) else {
                continue;
            };
            if !s.out.contains_key(&g) && p.data.iter().all(|&b| b == 0) {
                continue;
            }
            batch.push((g, p.data));
        }
        if batch.is_empty() {
            return Ok(());
        }
        // Compressed on every core (the bytes do not depend on how).
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8)
            .min(batch.len());
        let per = batch.len().div_ceil(threads);
        let records: Vec<io::Result<Vec<u8>>> = std::thread::scope(|sc| {
            let hs: Vec<_> = batch
                .chunks(per)
                .map(|c| {
                    sc.spawn(move || {
                        c.iter()
                            .map(|(g, d)| grain_record(*g, d))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![Err(io::Error::other("a compression thread panicked"))]
                    })
                })
                .collect()
        });
        let mut all = Vec::new();
        let mut at = Vec::with_capacity(batch.len());
        for ((g, _), r) in batch.iter().zip(records) {
            let r = r?;
            at.push((*g, sector_of(s.end + all.len() as u64)?));
            all.extend_from_slice(&r);
        }
        if let Err(e) = s.file.write_all_at(&all, s.end) {
            s.failed = true;
            return Err(e);
        }
        s.end += all.len() as u64;
        for (g, sec) in at {
            s.out.insert(g, sec);
        }
        Ok(())
    }

    /// The grain `g` as it reads now, out of the buffer or the file.
    fn current(&self, s: &mut State, g: u64) -> io::Result<Vec<u8>> {
        if let Some(p) = s.buffer.get(&g) {
            return Ok(p.data.clone());
        }
        Ok(self
            .stored(s, g)?
            .map_or_else(|| vec![0u8; GRAIN as usize], |b| b.to_vec()))
    }

    /// The last copy of grain `g` written out, inflated.
    fn stored(&self, s: &mut State, g: u64) -> io::Result<Option<Arc<[u8]>>> {
        let Some(&sec) = s.out.get(&g) else {
            return Ok(None);
        };
        let at = u64::from(sec) * SECTOR;
        if let Some((_, b)) = s.inflated.iter().find(|(h, _)| *h == at) {
            return Ok(Some(b.clone()));
        }
        let mut m = [0u8; 12];
        s.file.read_exact_at(&mut m, at)?;
        let size = u32::from_le_bytes([m[8], m[9], m[10], m[11]]) as usize;
        let mut packed = vec![0u8; size];
        s.file.read_exact_at(&mut packed, at + 12)?;
        let mut out = vec![0u8; GRAIN as usize];
        let n = inflate_into(&packed, &mut out)?;
        if n != out.len() {
            return Err(io::Error::other(format!(
                "{}: grain {g} written out does not read back",
                self.path.display()
            )));
        }
        let b: Arc<[u8]> = out.into();
        if s.inflated.len() >= INFLATED_CACHE {
            s.inflated.remove(0);
        }
        s.inflated.push((at, b.clone()));
        Ok(Some(b))
    }
}

/// Grain `g` (`data`) compressed behind its grain marker (the first
/// sector of the grain and the compressed length), padded to a sector.
fn grain_record(g: u64, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut enc = flate2::write::ZlibEncoder::new(vec![0u8; 12], flate2::Compression::fast());
    enc.write_all(data)?;
    let mut rec = enc.finish()?;
    let size = (rec.len() - 12) as u32;
    rec[..8].copy_from_slice(&(g * GRAIN_SECTORS).to_le_bytes());
    rec[8..12].copy_from_slice(&size.to_le_bytes());
    rec.resize(rec.len().div_ceil(512) * 512, 0);
    Ok(rec)
}

fn sector_of(at: u64) -> io::Result<u32> {
    u32::try_from(at / SECTOR).map_err(|_| {
        io::Error::new(
            io::ErrorKind::StorageFull,
            "a streamOptimized VMDK cannot grow past 2 TiB (offsets are 32-bit sectors)",
        )
    })
}

impl Device for StreamDisk {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let st = &self.0;
        st.check(off, buf.len(), "read")?;
        let mut s = st.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let g = pos / GRAIN;
            let within = (pos % GRAIN) as usize;
            let n = (GRAIN as usize - within).min(buf.len() - done);
            let piece = &mut buf[done..done + n];
            if let Some(p) = s.buffer.get(&g) {
                piece.copy_from_slice(&p.data[within..within + n]);
            } else {
                match st.stored(&mut s, g)? {
                    Some(b) => piece.copy_from_slice(&b[within..within + n]),
                    None => piece.fill(0),
                }
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let st = &self.0;
        st.check(off, buf.len(), "write")?;
        let mut s = st.lock();
        if s.finished || s.failed {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{}: the streamOptimized VMDK is complete (written once)",
                    st.path.display()
                ),
            ));
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let g = pos / GRAIN;
            let within = (pos % GRAIN) as usize;
            let n = (GRAIN as usize - within).min(buf.len() - done);
            let piece = &buf[done..done + n];
            s.tick += 1;
            let tick = s.tick;
            if !s.buffer.contains_key(&g) {
                if !s.out.contains_key(&g) && piece.iter().all(|&b| b == 0) {
                    // Zeros over a grain that reads as zeros.
                    done += n;
                    continue;
                }
                let data = st.current(&mut s, g)?;
                s.buffer.insert(
                    g,
                    Pending {
                        data,
                        touched: tick,
                    },
                );
            }
            if let Some(p) = s.buffer.get_mut(&g) {
                p.data[within..within + n].copy_from_slice(piece);
                p.touched = tick;
            }
            done += n;
        }
        if s.buffer.len() > BUFFER_GRAINS {
            let mut by_age: Vec<(u64, u64)> =
                s.buffer.iter().map(|(g, p)| (p.touched, *g)).collect();
            by_age.sort_unstable();
            let old: Vec<u64> = by_age
                .iter()
                .take(BUFFER_GRAINS / 4)
                .map(|(_, g)| *g)
                .collect();
            st.evict(&mut s, old)?;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        // Nothing is durable before the finish step writes the tables.
        Ok(())
    }

    fn len(&self) -> u64 {
        self.0.capacity
    }
}
