//! Restoring a metadump (v1 or v2) into a sparse image, as xfs_mdrestore
//! does: the output is sized from the superblock (`sb_dblocks` blocks; an
//! external log `sb_logblocks`, a realtime device `sb_rblocks`), every
//! copied block is written at its address, and the primary superblock is
//! written last, rebuilt from the dump's copy with `sb_inprogress` clear and
//! its CRC recomputed, the rest of its sector zero.

use super::format::*;
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use xfs_format::sb::*;
use zerocopy::FromBytes;

/// What a restore wrote.
#[derive(Debug, Default, Clone)]
pub struct RestoreReport {
    /// Bytes of metadata written (all devices).
    pub bytes: u64,
    /// Records (v1 data blocks, v2 extents) restored.
    pub records: u64,
    /// The restored data device's size in bytes.
    pub data_size: u64,
}

/// Where a restore writes: the data device, and the external log and
/// realtime devices when the dump holds them.
pub struct Targets<'a> {
    /// The data device (an image file, made sparse, or a block device).
    pub data: &'a File,
    /// Whether `data` is a regular file (sized with `set_len`) or a device
    /// (which must be large enough).
    pub data_is_file: bool,
    /// The external log device.
    pub log: Option<(&'a File, bool)>,
    /// The realtime device.
    pub rt: Option<(&'a File, bool)>,
}

/// The metadump file being read, with the byte offset reached.
struct Src<R> {
    r: R,
    pos: u64,
}

impl<R: Read> Src<R> {
    /// Fills `buf`; `Ok(false)` at a clean end of file before any byte when
    /// `eof_ok`; a short read names `what` and the offset.
    fn fill(&mut self, buf: &mut [u8], what: &'static str, eof_ok: bool) -> Result<bool> {
        let start = self.pos;
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => {
                    if got == 0 && eof_ok {
                        return Ok(false);
                    }
                    return Err(Error::corrupt(
                        what,
                        at(start),
                        format!(
                            "the metadump ends after {got} of its {} bytes (truncated file)",
                            buf.len()
                        ),
                    ));
                }
                Ok(n) => {
                    got += n;
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::Io(e)),
            }
        }
        Ok(true)
    }
}

fn at(off: u64) -> Location {
    Location::Other(format!("byte {off} of the metadump"))
}

/// Reads the header of a metadump (its first bytes: 8 for v1, 24 for v2),
/// checking what xfs_mdrestore checks.
pub fn read_header(r: &mut impl Read) -> Result<Header> {
    let mut magic = [0u8; 4];
    let mut src = Src { r, pos: 0 };
    src.fill(&mut magic, "metadump header", false)?;
    match u32::from_be_bytes(magic) {
        MD1_MAGIC => {
            let mut h = [0u8; 4];
            src.fill(&mut h, "metadump v1 index block 0", false)?;
            Ok(Header::V1 {
                count: u16::from_be_bytes([h[0], h[1]]),
                blocklog: h[2],
                info: h[3],
            })
        }
        MD2_MAGIC => {
            let mut h = [0u8; MD2_HDR - 4];
            src.fill(&mut h, "metadump v2 header", false)?;
            let version = be32(&h, 0);
            let compat = be32(&h, 4);
            let incompat = be32(&h, 8);
            let reserved = u64::from_be_bytes(h[12..20].try_into().unwrap());
            if version != 2 {
                return Err(Error::corrupt(
                    "metadump v2 header",
                    at(4),
                    format!("version {version}, not 2"),
                ));
            }
            if incompat & !MD2_INCOMPAT_RTDEVICE != 0 {
                return Err(Error::Unsupported(format!(
                    "metadump v2 header has unknown incompat flags {:#x}",
                    incompat & !MD2_INCOMPAT_RTDEVICE
                )));
            }
            if reserved != 0 {
                return Err(Error::corrupt(
                    "metadump v2 header",
                    at(16),
                    "reserved field is not zero",
                ));
            }
            Ok(Header::V2 { compat, incompat })
        }
        m => Err(Error::corrupt(
            "metadump header",
            at(0),
            format!("magic {m:#010x} is neither v1 'XFSM' nor v2 'XMD2': not a metadump"),
        )),
    }
}

/// The primary superblock's fields a restore needs.
struct SbInfo {
    sectsize: u32,
    dblocks: u64,
    blocksize: u32,
    logstart: u64,
    logblocks: u32,
    rblocks: u64,
    /// The superblock sector as the dump has it (at least the
    /// superblock's bytes).
    raw: Vec<u8>,
}

fn sb_info(buf: &[u8], off: u64) -> Result<SbInfo> {
    let bad = |d: String| Error::corrupt("metadump primary superblock", at(off), d);
    let Ok((sb, _)) = Dsb::ref_from_prefix(buf) else {
        return Err(bad(format!(
            "{} bytes, shorter than a superblock",
            buf.len()
        )));
    };
    if sb.sb_magicnum.get() != XFS_SB_MAGIC {
        return Err(bad(format!(
            "bad magic {:#010x} (not 'XFSB')",
            sb.sb_magicnum.get()
        )));
    }
    let sectsize = u32::from(sb.sb_sectsize.get());
    if !sectsize.is_power_of_two() || !(512..=32768).contains(&sectsize) {
        return Err(bad(format!("bad sector size {sectsize}")));
    }
    let blocksize = sb.sb_blocksize.get();
    if !blocksize.is_power_of_two() || !(512..=65536).contains(&blocksize) {
        return Err(bad(format!("bad block size {blocksize}")));
    }
    let dblocks = sb.sb_dblocks.get();
    if dblocks == 0
        || dblocks
            .checked_mul(u64::from(blocksize))
            .is_none_or(|b| b > 1 << 62)
    {
        return Err(bad(format!("bad data block count {dblocks}")));
    }
    let rblocks = sb.sb_rblocks.get();
    if rblocks
        .checked_mul(u64::from(blocksize))
        .is_none_or(|b| b > 1 << 62)
    {
        return Err(bad(format!("bad realtime block count {rblocks}")));
    }
    Ok(SbInfo {
        sectsize,
        dblocks,
        blocksize,
        logstart: sb.sb_logstart.get(),
        logblocks: sb.sb_logblocks.get(),
        rblocks,
        raw: buf.to_vec(),
    })
}

/// The primary superblock sector xfs_mdrestore writes last: the dump's
/// superblock converted to its in-memory form and back, which keeps the
/// fields the format defines for the features set and zeroes the rest of
/// the sector, with `sb_inprogress` 0 and, on v5, the CRC recomputed.
fn final_sb(sb: &SbInfo) -> Vec<u8> {
    let raw = &sb.raw;
    let mut out = vec![0u8; sb.sectsize as usize];
    let dsb = Dsb::ref_from_prefix(raw).unwrap().0;
    let v5 = dsb.sb_versionnum.get() & XFS_SB_VERSION_NUMBITS == XFS_SB_VERSION_5;
    let incompat = dsb.sb_features_incompat.get();
    // v4 superblocks end with sb_bad_features2 (byte 208).
    let keep = if v5 { META_UUID_OFF } else { 208 };
    out[..keep].copy_from_slice(&raw[..keep]);
    if v5 {
        if incompat & XFS_SB_FEAT_INCOMPAT_META_UUID != 0 {
            out[META_UUID_OFF..XFS_DSB_SIZE].copy_from_slice(&raw[META_UUID_OFF..XFS_DSB_SIZE]);
        }
        if incompat & XFS_SB_FEAT_INCOMPAT_METADIR != 0 {
            // sb_metadirino, sb_rgcount, sb_rgextents, sb_rgblklog; the pad stays zero.
            let end = XFS_DSB_SIZE + 17;
            if raw.len() >= end {
                out[XFS_DSB_SIZE..end].copy_from_slice(&raw[XFS_DSB_SIZE..end]);
            }
        }
        if incompat & XFS_SB_FEAT_INCOMPAT_ZONED != 0 {
            let (s, e) = (XFS_DSB_METADIR_SIZE, XFS_DSB_METADIR_SIZE + 16);
            if raw.len() >= e {
                out[s..e].copy_from_slice(&raw[s..e]);
            }
        }
    }
    // Quota inode numbers of 0 (older mkfs) become NULLFSINO, one value for
    // "none", as libxfs reads a superblock (not with a metadata directory,
    // which holds the quota inodes itself). v4 has no sb_pquotino.
    if incompat & XFS_SB_FEAT_INCOMPAT_METADIR == 0 || !v5 {
        let mut fields = vec![
            std::mem::offset_of!(Dsb, sb_uquotino),
            std::mem::offset_of!(Dsb, sb_gquotino),
        ];
        if v5 {
            fields.push(std::mem::offset_of!(Dsb, sb_pquotino));
        }
        for f in fields {
            if out[f..f + 8] == [0; 8] {
                out[f..f + 8].copy_from_slice(&[0xff; 8]);
            }
        }
    }
    out[offset_of_inprogress()] = 0;
    if v5 {
        xfs_format::crc::stamp(&mut out, XFS_SB_CRC_OFF);
    }
    out
}

/// Byte offset of `sb_meta_uuid`.
const META_UUID_OFF: usize = std::mem::offset_of!(Dsb, sb_meta_uuid);

fn offset_of_inprogress() -> usize {
    std::mem::offset_of!(Dsb, sb_inprogress)
}

/// A device being written: its file, its size, its name for errors.
struct Out<'a> {
    file: &'a File,
    size: u64,
    name: &'static str,
}

impl Out<'_> {
    fn prepare(file: &File, is_file: bool, size: u64, name: &'static str) -> Result<()> {
        if is_file {
            file.set_len(size)?;
        } else {
            let have = {
                use std::io::Seek;
                let mut f = file;
                f.seek(std::io::SeekFrom::End(0))?
            };
            if have < size {
                return Err(Error::Invalid(format!(
                    "the {name} device holds {have} bytes; the filesystem needs {size}"
                )));
            }
        }
        Ok(())
    }

    fn write(&self, buf: &[u8], off: u64, rec: &str, at_md: u64) -> Result<()> {
        if off
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.size)
        {
            return Err(Error::corrupt(
                "metadump record",
                at(at_md),
                format!(
                    "{rec}: {} bytes at {} device byte {off}, past its end ({} bytes)",
                    buf.len(),
                    self.name,
                    self.size
                ),
            ));
        }
        self.file.write_all_at(buf, off)?;
        Ok(())
    }
}

/// Restores the rest of a metadump whose header `read_header` just read
/// from `r` into `t`. `progress` is called with the bytes read so far.
pub fn restore(
    r: &mut impl Read,
    header: &Header,
    t: &Targets<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<RestoreReport> {
    match *header {
        Header::V1 {
            count, blocklog, ..
        } => restore_v1(r, count, blocklog, t, progress),
        Header::V2 { compat, incompat } => restore_v2(r, compat, incompat, t, progress),
    }
}

fn restore_v1(
    r: &mut impl Read,
    count: u16,
    blocklog: u8,
    t: &Targets<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<RestoreReport> {
    if t.log.is_some() || t.rt.is_some() {
        return Err(Error::Invalid(
            "a v1 metadump holds no external log or realtime device: give neither".into(),
        ));
    }
    if !(9..=16).contains(&blocklog) {
        return Err(Error::corrupt(
            "metadump v1 index block 0",
            at(6),
            format!("block log {blocklog} (block size 2^{blocklog}) is not 9 to 16"),
        ));
    }
    let bsize = 1usize << blocklog;
    let max = (bsize - MD1_HDR) / 8;
    let mut src = Src { r, pos: 8 };
    let mut index = vec![0u8; bsize];
    let mut data = vec![0u8; max * bsize];
    let mut rep = RestoreReport::default();
    let mut count = usize::from(count);
    let mut ib = 0u64;
    let mut ib_off = 0u64;
    if count == 0 || count > max {
        return Err(Error::corrupt(
            "metadump v1 index block 0",
            at(4),
            format!("bad block count {count} (1 to {max})"),
        ));
    }
    src.fill(&mut index[MD1_HDR..], "metadump v1 index block 0", false)?;
    let first = u64::from_be_bytes(index[MD1_HDR..MD1_HDR + 8].try_into().unwrap());
    if first != 0 {
        return Err(Error::corrupt(
            "metadump v1 index block 0",
            at(8),
            format!("the first block is at sector {first}, not the primary superblock at 0"),
        ));
    }
    let data_off = src.pos;
    src.fill(&mut data[..count * bsize], "metadump v1 data blocks", false)?;
    let sb = sb_info(&data[..bsize], data_off)?;
    if sb.sectsize as usize > max * bsize {
        return Err(Error::corrupt(
            "metadump primary superblock",
            at(data_off),
            format!(
                "sector size {} is larger than a v1 index can hold",
                sb.sectsize
            ),
        ));
    }
    let size = sb.dblocks * u64::from(sb.blocksize);
    Out::prepare(t.data, t.data_is_file, size, "data")?;
    rep.data_size = size;
    let out = Out {
        file: t.data,
        size,
        name: "data",
    };
    // The superblock is marked in progress until the last write.
    data[offset_of_inprogress()] = 1;
    let mut blocks_off = data_off;
    loop {
        progress(src.pos);
        for i in 0..count {
            let e = MD1_HDR + i * 8;
            let daddr = u64::from_be_bytes(index[e..e + 8].try_into().unwrap());
            let off = daddr.saturating_mul(512);
            let rec = format!("v1 index block {ib} (metadump byte {ib_off}) entry {i}");
            out.write(
                &data[i * bsize..(i + 1) * bsize],
                off,
                &rec,
                blocks_off + (i * bsize) as u64,
            )?;
            rep.bytes += bsize as u64;
            rep.records += 1;
        }
        if count < max {
            break;
        }
        ib += 1;
        ib_off = src.pos;
        let what = "metadump v1 index block";
        if !src.fill(&mut index, what, true)? {
            // xfs_metadump ends a full last index block with an empty one;
            // a file ending right after a full block is taken as complete.
            break;
        }
        let magic = u32::from_be_bytes(index[..4].try_into().unwrap());
        count = usize::from(u16::from_be_bytes([index[4], index[5]]));
        if count == 0 {
            break;
        }
        if magic != MD1_MAGIC {
            return Err(Error::corrupt(
                what,
                at(ib_off),
                format!("index block {ib}: magic {magic:#010x}, not 'XFSM'"),
            ));
        }
        if count > max {
            return Err(Error::corrupt(
                what,
                at(ib_off + 4),
                format!("index block {ib}: bad block count {count} (1 to {max})"),
            ));
        }
        blocks_off = src.pos;
        src.fill(&mut data[..count * bsize], "metadump v1 data blocks", false)?;
    }
    out.write(&final_sb(&sb), 0, "primary superblock", data_off)?;
    Ok(rep)
}

fn restore_v2(
    r: &mut impl Read,
    compat: u32,
    incompat: u32,
    t: &Targets<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<RestoreReport> {
    if compat & MD2_COMPAT_EXTERNALLOG != 0 && t.log.is_none() {
        return Err(Error::Invalid(
            "this metadump holds an external log: give the log device's file (--logdev FILE)"
                .into(),
        ));
    }
    if incompat & MD2_INCOMPAT_RTDEVICE != 0 && t.rt.is_none() {
        return Err(Error::Invalid(
            "this metadump holds realtime device contents: give its file (--rtdev FILE)".into(),
        ));
    }
    let mut src = Src {
        r,
        pos: MD2_HDR as u64,
    };
    let mut rec = [0u8; MD2_EXTENT];
    let mut rep = RestoreReport::default();
    src.fill(&mut rec, "metadump v2 extent record 0", false)?;
    let addr = u64::from_be_bytes(rec[..8].try_into().unwrap());
    let len = u32::from_be_bytes(rec[8..].try_into().unwrap());
    if addr != 0 || len == 0 {
        return Err(Error::corrupt(
            "metadump v2 extent record 0",
            at(MD2_HDR as u64),
            format!(
                "address {addr:#x} length {len}: the first record must be the primary \
                 superblock at data-device sector 0"
            ),
        ));
    }
    const CHUNK: usize = 8 << 20;
    let mut buf = vec![0u8; (len as usize * 512).clamp(512, CHUNK)];
    let first_len = len as usize * 512;
    let sb_off = src.pos;
    let first_read = first_len.min(buf.len());
    src.fill(&mut buf[..first_read], "metadump v2 extent 0 data", false)?;
    let sb = sb_info(&buf[..first_read], sb_off)?;
    let size = sb.dblocks * u64::from(sb.blocksize);
    Out::prepare(t.data, t.data_is_file, size, "data")?;
    rep.data_size = size;
    let data = Out {
        file: t.data,
        size,
        name: "data",
    };
    let log = match t.log {
        Some((f, is_file)) if sb.logstart == 0 => {
            let s = u64::from(sb.logblocks) * u64::from(sb.blocksize);
            Out::prepare(f, is_file, s, "log")?;
            Some(Out {
                file: f,
                size: s,
                name: "log",
            })
        }
        Some(_) => {
            return Err(Error::Invalid(
                "the filesystem's log is internal (sb_logstart is not 0): no log device".into(),
            ))
        }
        None => None,
    };
    let rt = match t.rt {
        Some((f, is_file)) => {
            let s = sb.rblocks * u64::from(sb.blocksize);
            Out::prepare(f, is_file, s, "realtime")?;
            Some(Out {
                file: f,
                size: s,
                name: "realtime",
            })
        }
        None => None,
    };
    buf[offset_of_inprogress()] = 1;
    data.write(&buf[..first_read], 0, "extent record 0", sb_off)?;
    // The rest of a first extent longer than the buffer.
    let mut done = first_read;
    while done < first_len {
        let n = (first_len - done).min(buf.len());
        let o = src.pos;
        src.fill(&mut buf[..n], "metadump v2 extent 0 data", false)?;
        data.write(&buf[..n], done as u64, "extent record 0", o)?;
        done += n;
    }
    rep.bytes += first_len as u64;
    rep.records += 1;
    let mut nrec = 1u64;
    loop {
        let rec_off = src.pos;
        if !src.fill(&mut rec, "metadump v2 extent record", true)? {
            break;
        }
        let addr = u64::from_be_bytes(rec[..8].try_into().unwrap());
        let len = u64::from(u32::from_be_bytes(rec[8..].try_into().unwrap())) * 512;
        let name = format!("extent record {nrec}");
        let dev = match addr >> MD2_DEVICE_SHIFT {
            MD2_DEV_DATA => &data,
            MD2_DEV_LOG => log.as_ref().ok_or_else(|| {
                Error::corrupt(
                    "metadump v2 extent record",
                    at(rec_off),
                    format!("{name} is on the external log, which the header does not announce"),
                )
            })?,
            MD2_DEV_RT => rt.as_ref().ok_or_else(|| {
                Error::corrupt(
                    "metadump v2 extent record",
                    at(rec_off),
                    format!("{name} is on the realtime device, which the header does not announce"),
                )
            })?,
            d => {
                return Err(Error::corrupt(
                    "metadump v2 extent record",
                    at(rec_off),
                    format!("{name}: unknown device {d} in address {addr:#x}"),
                ))
            }
        };
        let mut off = (addr & MD2_DADDR_MASK) * 512;
        if off.checked_add(len).is_none_or(|e| e > dev.size) {
            return Err(Error::corrupt(
                "metadump v2 extent record",
                at(rec_off),
                format!(
                    "{name}: {len} bytes at {} device byte {off}, past its end ({} bytes)",
                    dev.name, dev.size
                ),
            ));
        }
        let mut left = len as usize;
        while left > 0 {
            let n = left.min(CHUNK);
            if buf.len() < n {
                buf.resize(n, 0);
            }
            let o = src.pos;
            src.fill(&mut buf[..n], "metadump v2 extent data", false)?;
            dev.write(&buf[..n], off, &name, o)?;
            off += n as u64;
            left -= n;
        }
        rep.bytes += len;
        rep.records += 1;
        nrec += 1;
        progress(src.pos);
    }
    data.write(&final_sb(&sb), 0, "primary superblock", sb_off)?;
    Ok(rep)
}
