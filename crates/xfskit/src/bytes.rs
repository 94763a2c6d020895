//! Field reads and writes at byte offsets, for code that walks packed
//! layouts: big-endian for XFS's on-disk and logged structures and the
//! big-endian container formats (qcow2, VHD), little-endian for the log's
//! in-memory item formats and the other containers and partition tables
//! (VHDX, VMDK, VDI, GPT, MBR, LVM labels).
//!
//! The plain reads and the `put_` writes index, and so panic on a short
//! slice like any slice index: callers bounds-check `off` first. The
//! `_or0` reads give 0 when the field does not fit in the slice, for
//! callers that treat a short buffer as zeroed; the `get_` reads give
//! None.

/// The big-endian u16 at `off`.
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// The big-endian u32 at `off`.
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The big-endian u64 at `off`.
pub(crate) fn be64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(a)
}

/// The big-endian u32 at `off`, or 0 when `b` ends before it does.
pub(crate) fn be32_or0(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

/// The little-endian u16 at `off`.
pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// The little-endian u32 at `off`.
pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The little-endian u64 at `off`.
pub(crate) fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The little-endian u32 at `off`, or None when `b` ends before it does.
pub(crate) fn get_le32(b: &[u8], off: usize) -> Option<u32> {
    let x = b.get(off..off + 4)?;
    Some(u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
}

/// Stores `v` big-endian at `off`.
pub(crate) fn put_be16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Stores `v` big-endian at `off`.
pub(crate) fn put_be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Stores `v` big-endian at `off`.
pub(crate) fn put_be64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Stores `v` little-endian at `off`.
pub(crate) fn put_le32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Stores `v` little-endian at `off`.
pub(crate) fn put_le64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// A UUID in its usual lowercase 8-4-4-4-12 form.
pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_round_trip() {
        let mut b = [0u8; 16];
        put_be16(&mut b, 0, 0x0102);
        put_be32(&mut b, 2, 0x0304_0506);
        put_be64(&mut b, 6, 0x0708_090a_0b0c_0d0e);
        assert_eq!(b[..14], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        assert_eq!(be16(&b, 0), 0x0102);
        assert_eq!(be32(&b, 2), 0x0304_0506);
        assert_eq!(be64(&b, 6), 0x0708_090a_0b0c_0d0e);
        assert_eq!(le16(&b, 0), 0x0201);
        assert_eq!(le32(&b, 2), 0x0605_0403);
        assert_eq!(le64(&b, 6), 0x0e0d_0c0b_0a09_0807);
        put_le32(&mut b, 0, 0x0102_0304);
        put_le64(&mut b, 4, 0x0506_0708_090a_0b0c);
        assert_eq!(b[..12], [4, 3, 2, 1, 12, 11, 10, 9, 8, 7, 6, 5]);
    }

    #[test]
    fn checked_reads_of_a_short_slice() {
        let b = [1u8, 2, 3, 4, 5];
        assert_eq!(be32_or0(&b, 1), 0x0203_0405);
        assert_eq!(be32_or0(&b, 2), 0);
        assert_eq!(be32_or0(&b, 9), 0);
        assert_eq!(get_le32(&b, 1), Some(0x0504_0302));
        assert_eq!(get_le32(&b, 2), None);
    }

    #[test]
    #[should_panic]
    fn plain_reads_panic_on_a_short_slice() {
        be32(&[0u8; 3], 0);
    }
}
