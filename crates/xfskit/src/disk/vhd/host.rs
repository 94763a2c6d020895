//! Helpers shared by VHD and VDI: the host file written in place
//! ([`crate::dev::GrowFile`]), padded reads, new UUIDs and times.

use crate::dev::Device;
use std::fs::File;
use std::io;

/// The host file of a VHD or VDI written in place.
pub(crate) use crate::dev::GrowFile as HostFile;

/// Reads `buf` from `file` at `off`; the part past the file's end reads as
/// zeros (a block whose tail was never written, a file cut short), as QEMU
/// reads it.
pub(crate) fn read_padded(file: &dyn Device, buf: &mut [u8], off: u64) -> io::Result<()> {
    let n = file.len().saturating_sub(off).min(buf.len() as u64) as usize;
    buf[n..].fill(0);
    if n > 0 {
        file.read_at(&mut buf[..n], off)?;
    }
    Ok(())
}

/// 16 bytes for a new image's UUID: derived from `SOURCE_DATE_EPOCH`, the
/// size and `salt` when that is set (a reproducible build gives the same
/// file), from the system's random source otherwise.
pub(crate) fn new_uuid(size: u64, salt: &[u8]) -> [u8; 16] {
    let mut u = [0u8; 16];
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok();
    let random = epoch.is_none()
        && File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut u))
            .is_ok();
    if !random {
        // FNV-1a over the inputs, spread over 16 bytes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = match &epoch {
            Some(e) => e.as_bytes().to_vec(),
            None => [
                now.to_le_bytes(),
                u64::from(std::process::id()).to_le_bytes(),
            ]
            .concat(),
        };
        for chunk in [&seed[..], &size.to_le_bytes(), salt] {
            for &b in chunk {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        u[..8].copy_from_slice(&h.to_le_bytes());
        let h2 = h.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ size;
        u[8..].copy_from_slice(&h2.to_le_bytes());
    }
    // A version 4 (random) UUID, RFC 4122 variant.
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// The time a new image is stamped with: `SOURCE_DATE_EPOCH` when set,
/// else now (Unix seconds).
pub(crate) fn stamp_time() -> u64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        })
}
