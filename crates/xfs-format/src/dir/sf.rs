//! Shortform directories: the whole directory packed into the inode's data
//! fork (format LOCAL).
//!
//! Layout: a header `count` (u8), `i8count` (u8), then the parent inode number
//! (4 bytes big-endian if `i8count == 0`, else 8). Each entry that follows is
//! `namelen` (u8), `offset` (be16, the entry's would-be position in a data
//! block), the name, a file type byte (FTYPE feature only), and the inode
//! number in the same 4- or 8-byte width as the parent.

/// Size of an inode number in a shortform directory without 8-byte numbers.
pub const XFS_INO32_SIZE: usize = 4;
/// Size of an inode number in a shortform directory with 8-byte numbers.
pub const XFS_INO64_SIZE: usize = 8;

/// Decoded shortform header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SfHdr {
    /// Number of entries (not counting "." and "..").
    pub count: u8,
    /// Number of entries whose inode number needs 8 bytes; nonzero switches
    /// every inode number in the fork (parent included) to 8 bytes.
    pub i8count: u8,
    /// Parent directory inode number.
    pub parent: u64,
}

impl SfHdr {
    /// Width in bytes of every inode number in this directory.
    pub fn ino_size(&self) -> usize {
        if self.i8count == 0 {
            XFS_INO32_SIZE
        } else {
            XFS_INO64_SIZE
        }
    }

    /// Size of the encoded header.
    pub fn size(&self) -> usize {
        sf_hdr_size(self.i8count)
    }
}

/// Size of the shortform header for a given `i8count` (6 or 10 bytes).
pub const fn sf_hdr_size(i8count: u8) -> usize {
    2 + if i8count == 0 {
        XFS_INO32_SIZE
    } else {
        XFS_INO64_SIZE
    }
}

/// Size of one shortform entry.
pub const fn sf_entsize(namelen: usize, has_ftype: bool, i8: bool) -> usize {
    1 + 2 + namelen + has_ftype as usize + if i8 { XFS_INO64_SIZE } else { XFS_INO32_SIZE }
}

fn read_ino(b: &[u8], size: usize) -> Option<u64> {
    let b = b.get(..size)?;
    Some(b.iter().fold(0u64, |acc, &x| (acc << 8) | x as u64))
}

fn write_ino(b: &mut [u8], ino: u64, size: usize) -> Option<()> {
    let b = b.get_mut(..size)?;
    let bytes = ino.to_be_bytes();
    b.copy_from_slice(&bytes[8 - size..]);
    Some(())
}

/// Parses the header at the start of a shortform data fork.
pub fn parse_sf_hdr(fork: &[u8]) -> Option<SfHdr> {
    let count = *fork.first()?;
    let i8count = *fork.get(1)?;
    let parent = read_ino(fork.get(2..)?, sf_hdr_size(i8count) - 2)?;
    Some(SfHdr {
        count,
        i8count,
        parent,
    })
}

/// Encodes a header into `fork`; returns its size or `None` if it does not fit.
/// A parent above 32 bits needs `i8count > 0` and is rejected otherwise.
pub fn write_sf_hdr(fork: &mut [u8], hdr: &SfHdr) -> Option<usize> {
    if hdr.i8count == 0 && hdr.parent > super::XFS_DIR2_MAX_SHORT_INUM {
        return None;
    }
    let size = hdr.size();
    let out = fork.get_mut(..size)?;
    out[0] = hdr.count;
    out[1] = hdr.i8count;
    write_ino(&mut out[2..], hdr.parent, hdr.ino_size())?;
    Some(size)
}

/// One shortform entry, borrowed from the fork bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SfEntry<'a> {
    /// Position the entry would have in a data block (used for readdir cookies).
    pub offset: u16,
    /// Entry name (never empty).
    pub name: &'a [u8],
    /// File type byte, when the FTYPE feature is on.
    pub ftype: Option<u8>,
    /// Inode number.
    pub inumber: u64,
    /// Encoded size of the entry in bytes.
    pub size: usize,
}

/// Parses the entry at byte `pos` of a shortform fork. `i8` is true when the
/// header's `i8count` is nonzero. Returns `None` when any part lies past the
/// slice or the name is empty.
pub fn parse_sf_entry(fork: &[u8], pos: usize, i8: bool, has_ftype: bool) -> Option<SfEntry<'_>> {
    let namelen = *fork.get(pos)? as usize;
    if namelen == 0 {
        return None;
    }
    let size = sf_entsize(namelen, has_ftype, i8);
    let e = fork.get(pos..pos.checked_add(size)?)?;
    let offset = u16::from_be_bytes([e[1], e[2]]);
    let name = &e[3..3 + namelen];
    let mut p = 3 + namelen;
    let ftype = if has_ftype {
        p += 1;
        Some(e[p - 1])
    } else {
        None
    };
    let inumber = read_ino(&e[p..], if i8 { XFS_INO64_SIZE } else { XFS_INO32_SIZE })?;
    Some(SfEntry {
        offset,
        name,
        ftype,
        inumber,
        size,
    })
}

/// Encodes an entry at `pos`; returns its size, or `None` if it does not fit,
/// the name is empty or too long, or the inode needs 8 bytes but `i8` is false.
pub fn write_sf_entry(
    fork: &mut [u8],
    pos: usize,
    i8: bool,
    offset: u16,
    name: &[u8],
    ftype: Option<u8>,
    inumber: u64,
) -> Option<usize> {
    if name.is_empty() || name.len() > super::XFS_NAME_MAXLEN {
        return None;
    }
    if !i8 && inumber > super::XFS_DIR2_MAX_SHORT_INUM {
        return None;
    }
    let size = sf_entsize(name.len(), ftype.is_some(), i8);
    let e = fork.get_mut(pos..pos.checked_add(size)?)?;
    e[0] = name.len() as u8;
    e[1..3].copy_from_slice(&offset.to_be_bytes());
    e[3..3 + name.len()].copy_from_slice(name);
    let mut p = 3 + name.len();
    if let Some(ft) = ftype {
        e[p] = ft;
        p += 1;
    }
    write_ino(
        &mut e[p..],
        inumber,
        if i8 { XFS_INO64_SIZE } else { XFS_INO32_SIZE },
    )?;
    Some(size)
}

/// Iterator over the entries of a shortform fork; stops (yielding an `Err`
/// with the failing position) at the first entry that does not parse.
pub struct SfIter<'a> {
    fork: &'a [u8],
    pos: usize,
    left: u8,
    i8: bool,
    has_ftype: bool,
}

impl<'a> SfIter<'a> {
    /// Starts iterating a fork whose header has already been parsed.
    pub fn new(fork: &'a [u8], hdr: &SfHdr, has_ftype: bool) -> Self {
        SfIter {
            fork,
            pos: hdr.size(),
            left: hdr.count,
            i8: hdr.i8count != 0,
            has_ftype,
        }
    }
}

impl<'a> Iterator for SfIter<'a> {
    type Item = Result<SfEntry<'a>, usize>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        match parse_sf_entry(self.fork, self.pos, self.i8, self.has_ftype) {
            Some(e) => {
                self.left -= 1;
                self.pos += e.size;
                Some(Ok(e))
            }
            None => {
                self.left = 0;
                Some(Err(self.pos))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_sizes() {
        assert_eq!(sf_hdr_size(0), 6);
        assert_eq!(sf_hdr_size(3), 10);
        assert_eq!(sf_entsize(3, true, false), 11);
        assert_eq!(sf_entsize(3, false, true), 14);
    }

    #[test]
    fn round_trip_4byte() {
        let mut fork = [0u8; 64];
        let hdr = SfHdr {
            count: 2,
            i8count: 0,
            parent: 128,
        };
        let mut pos = write_sf_hdr(&mut fork, &hdr).unwrap_or(0);
        assert_eq!(pos, 6);
        pos += write_sf_entry(&mut fork, pos, false, 96, b"abc", Some(1), 131).unwrap_or(0);
        pos += write_sf_entry(&mut fork, pos, false, 112, b"d", Some(2), 132).unwrap_or(0);
        assert_eq!(pos, 6 + 11 + 9);
        let back = parse_sf_hdr(&fork);
        assert_eq!(back, Some(hdr));
        let ents: Vec<_> = SfIter::new(&fork, &hdr, true).collect();
        assert_eq!(ents.len(), 2);
        assert_eq!(
            ents[0],
            Ok(SfEntry {
                offset: 96,
                name: b"abc",
                ftype: Some(1),
                inumber: 131,
                size: 11
            })
        );
        assert_eq!(ents[1].map(|e| (e.name, e.inumber)), Ok((&b"d"[..], 132)));
    }

    #[test]
    fn round_trip_8byte() {
        let mut fork = [0u8; 64];
        let hdr = SfHdr {
            count: 1,
            i8count: 1,
            parent: 1 << 40,
        };
        assert_eq!(write_sf_hdr(&mut fork, &hdr), Some(10));
        assert_eq!(
            write_sf_entry(&mut fork, 10, true, 96, b"x", None, (1 << 33) + 5),
            Some(12)
        );
        assert_eq!(parse_sf_hdr(&fork), Some(hdr));
        let e = parse_sf_entry(&fork, 10, true, false);
        assert_eq!(e.map(|e| (e.inumber, e.ftype)), Some(((1 << 33) + 5, None)));
    }

    #[test]
    fn rejects_bad_input() {
        let mut fork = [0u8; 12];
        assert_eq!(
            write_sf_hdr(
                &mut fork,
                &SfHdr {
                    count: 0,
                    i8count: 0,
                    parent: 1 << 33
                }
            ),
            None
        );
        assert_eq!(
            write_sf_entry(&mut fork, 0, false, 0, b"a", None, 1 << 33),
            None
        );
        assert_eq!(parse_sf_hdr(&[1, 1, 0, 0]), None);
        // Entry claims a name longer than the fork.
        let fork = [1, 0, 0, 0, 0, 0, 200, 0, 96, b'a'];
        let hdr = parse_sf_hdr(&fork);
        assert!(hdr.is_some());
        let hdr = hdr.unwrap_or(SfHdr {
            count: 0,
            i8count: 0,
            parent: 0,
        });
        let mut it = SfIter::new(&fork, &hdr, true);
        assert_eq!(it.next(), Some(Err(6)));
        assert_eq!(it.next(), None);
    }
}
