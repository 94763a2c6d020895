//! CRC-32C helpers for self-describing v5 metadata.
//!
//! Every checksummed XFS object stores a CRC-32C (Castagnoli) of the whole
//! object, computed as if its own 4-byte checksum field held zero. The stored
//! value is little-endian regardless of the rest of the structure.

/// Four zero bytes fed to the CRC in place of the checksum field.
const ZERO4: [u8; 4] = [0; 4];

/// Computes the CRC-32C of `buf` as if the 4 bytes at `crc_off` were zero.
///
/// The buffer is never copied: the checksum is chained over the bytes before
/// the field, four zeros, and the bytes after it. If `crc_off + 4` runs past
/// the end of `buf`, the field is treated as lying partly or wholly outside
/// the buffer and only the bytes inside it are replaced by zeros.
pub fn crc32c_with_zeroed_field(buf: &[u8], crc_off: usize) -> u32 {
    let start = crc_off.min(buf.len());
    let end = crc_off.saturating_add(4).min(buf.len());
    let crc = crc32c::crc32c(&buf[..start]);
    let crc = crc32c::crc32c_append(crc, &ZERO4[..end - start]);
    crc32c::crc32c_append(crc, &buf[end..])
}

/// Reads the little-endian checksum stored at `crc_off`, if it fits in `buf`.
pub fn stored(buf: &[u8], crc_off: usize) -> Option<u32> {
    let bytes = buf.get(crc_off..crc_off.checked_add(4)?)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Returns true when the checksum stored at `crc_off` matches the contents.
///
/// A buffer too short to hold the checksum field never verifies.
pub fn verify(buf: &[u8], crc_off: usize) -> bool {
    match stored(buf, crc_off) {
        Some(want) => want == crc32c_with_zeroed_field(buf, crc_off),
        None => false,
    }
}

/// Computes the checksum of `buf` and writes it (little-endian) at `crc_off`.
///
/// Does nothing when the field would not fit inside `buf`; callers always pass
/// a structure's fixed CRC offset into a buffer at least that large.
pub fn stamp(buf: &mut [u8], crc_off: usize) {
    let Some(end) = crc_off.checked_add(4) else {
        return;
    };
    if end > buf.len() {
        return;
    }
    let crc = crc32c_with_zeroed_field(buf, crc_off);
    buf[crc_off..end].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // The standard CRC-32C check value for "123456789".
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn zeroed_field_matches_copy() {
        let mut buf: Vec<u8> = (0..512u32).map(|i| (i * 7 + 3) as u8).collect();
        let off = 224;
        let mut copy = buf.clone();
        copy[off..off + 4].fill(0);
        assert_eq!(crc32c_with_zeroed_field(&buf, off), crc32c::crc32c(&copy));
        // Field contents must not influence the result.
        buf[off] ^= 0xff;
        assert_eq!(crc32c_with_zeroed_field(&buf, off), crc32c::crc32c(&copy));
    }

    #[test]
    fn stamp_then_verify() {
        let mut buf: Vec<u8> = (0..4096u32).map(|i| (i ^ (i >> 3)) as u8).collect();
        for off in [0usize, 4, 52, 100, 4092] {
            stamp(&mut buf, off);
            assert!(verify(&buf, off), "offset {off}");
            let flip = (off + 9) % buf.len();
            buf[flip] ^= 1;
            assert!(!verify(&buf, off), "corruption undetected at {off}");
            buf[flip] ^= 1;
            assert!(verify(&buf, off));
        }
    }

    #[test]
    fn short_buffer_never_verifies() {
        let buf = [0u8; 6];
        assert!(!verify(&buf, 4));
        assert!(stored(&buf, usize::MAX).is_none());
        let mut b2 = [1u8; 6];
        stamp(&mut b2, 4);
        assert_eq!(b2, [1u8; 6]);
    }
}
