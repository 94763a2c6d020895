//! Big-endian field reads at byte offsets, for code that walks packed
//! on-disk layouts. Callers bounds-check `off` first (these index and so
//! panic on a short slice, like any slice index).

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
