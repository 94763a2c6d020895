//! Sizing the image: `--size auto` (the smallest image the source fits in,
//! plus slack) or `--size N`.
//!
//! A first pass over the source fills a [`Census`]: how many inodes, and how
//! many filesystem blocks its data, directories, extended attributes, long
//! symlinks and extent maps will take. [`auto_size`] then asks the mkfs
//! geometry code for candidate sizes until the free blocks of the fresh
//! filesystem (after AG headers, btree roots and the log) hold the census
//! plus slack, and the inode space limit (`imaxpct`) holds every inode.
//! mkfs.xfs 6.1 refuses filesystems below 300 MiB, so that is the floor.
//! The AG count is left to the mkfs defaults (unless `-d agcount=` is
//! given): an image file from 128 MiB to 4 TiB gets 4 AGs, so an automatic
//! size never means hundreds of tiny AGs.
//!
//! The estimate is checked against the kernel in the tests: a tree copied
//! with `cp -a` into a loop-mounted XFS takes no more than the census says.

use crate::error::{Error, Result};
use crate::mkfs::{compute_geometry, convert_size, MkfsGeometry, MkfsOptions, TargetKind};

/// mkfs.xfs (since 5.19) refuses data sections smaller than this.
pub const MIN_IMAGE_BYTES: u64 = 300 << 20;
/// Auto sizes are rounded up to a multiple of this.
const ROUND_BYTES: u64 = 1 << 20;
/// Size of the v5 inode core; the rest of an inode holds its forks.
const DINODE_CORE: u64 = 176;
/// Largest extent XFS records, in blocks (21-bit length).
const MAX_EXTENT_BLOCKS: u64 = (1 << 21) - 1;
/// Inodes per inode chunk.
const CHUNK_INODES: u64 = 64;

/// The sizes a census is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Filesystem block size in bytes.
    pub block_size: u64,
    /// Directory block size in bytes.
    pub dir_block_size: u64,
    /// Inode size in bytes.
    pub inode_size: u64,
}

impl Layout {
    /// The sizes mkfs would choose for these options.
    pub fn for_options(opts: &MkfsOptions) -> Result<Layout> {
        let mut o = opts.clone();
        o.data_size = Some("1g".into());
        o.agcount = None;
        o.agsize = None;
        o.log_size = None;
        let g = compute_geometry(&o, 1 << 30, TargetKind::File)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        Ok(Layout::from_geometry(&g))
    }

    /// The sizes of an existing geometry.
    pub fn from_geometry(g: &MkfsGeometry) -> Layout {
        Layout {
            block_size: u64::from(g.blocksize),
            dir_block_size: u64::from(g.dir_block_size()),
            inode_size: u64::from(g.inodesize),
        }
    }

    fn literal(&self) -> u64 {
        self.inode_size.saturating_sub(DINODE_CORE)
    }

    fn blocks(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block_size)
    }
}

/// What a source holds, counted in the units that decide the image size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Directories, the root included.
    pub dirs: u64,
    /// Regular files (each inode once).
    pub files: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Device nodes, fifos and sockets.
    pub specials: u64,
    /// Extra names of hard-linked files.
    pub hardlinks: u64,
    /// Bytes of file data to write (holes excluded).
    pub data_bytes: u64,
    /// Extended attributes.
    pub xattrs: u64,
    /// Blocks of file data.
    pub data_blocks: u64,
    /// Blocks of directory data, leaf, node and free-index blocks.
    pub dir_blocks: u64,
    /// Blocks of attribute forks that leave the inode, and remote values.
    pub xattr_blocks: u64,
    /// Blocks of symlink targets too long to stay in the inode.
    pub symlink_blocks: u64,
    /// Blocks of extent btrees of files with many extents.
    pub bmbt_blocks: u64,
}

impl Census {
    /// Inodes the image needs (one per directory, file, symlink, special).
    pub fn inodes(&self) -> u64 {
        self.dirs + self.files + self.symlinks + self.specials
    }

    /// Counts a directory with `entries` names totalling `name_bytes` bytes.
    pub fn add_dir(&mut self, l: &Layout, entries: u64, name_bytes: u64) {
        self.dirs += 1;
        // Short form: a 6-byte header, per entry a length, a 2-byte offset,
        // the name, a file type and a 4-byte inode number.
        if 6 + entries * 8 + name_bytes <= l.literal() {
            return;
        }
        // Data entries: 8-byte inode number, length, name, type, 2-byte tag,
        // rounded to 8 bytes; "." and ".." take 16 each; 64-byte headers.
        let data = entries * 12 + name_bytes + entries * 7 + 32;
        let usable = l.dir_block_size - 64;
        let data_blocks = data.div_ceil(usable);
        let leaf_bytes = (entries + 2) * 8;
        let dir_blocks = if data_blocks == 1 && data + leaf_bytes + 8 <= usable {
            1
        } else {
            let leaves = leaf_bytes.div_ceil(usable);
            let node = if leaves > 1 {
                1 + (data_blocks * 2).div_ceil(usable) + leaves.div_ceil(usable / 8)
            } else {
                0
            };
            data_blocks + leaves + node
        };
        self.dir_blocks += dir_blocks * (l.dir_block_size / l.block_size);
    }

    /// Counts a regular file whose data lies in `segments` (offset, length).
    pub fn add_file(&mut self, l: &Layout, segments: impl IntoIterator<Item = (u64, u64)>) {
        self.files += 1;
        let (mut blocks, mut extents) = (0u64, 0u64);
        for (off, len) in segments {
            if len == 0 {
                continue;
            }
            let first = off / l.block_size;
            let end = off.saturating_add(len).div_ceil(l.block_size);
            let b = end - first;
            self.data_bytes += len;
            blocks += b;
            extents += b.div_ceil(MAX_EXTENT_BLOCKS);
        }
        self.data_blocks += blocks;
        let inline = l.literal() / 2 / 16;
        if extents > inline {
            let per_leaf = (l.block_size - 72) / 16;
            let leaves = extents.div_ceil(per_leaf);
            self.bmbt_blocks += leaves + leaves.div_ceil(per_leaf / 2).max(1);
        }
    }

    /// Counts a symbolic link with a target of `len` bytes.
    pub fn add_symlink(&mut self, l: &Layout, len: u64) {
        self.symlinks += 1;
        if len > l.literal() {
            self.symlink_blocks += len.div_ceil(l.block_size - 56);
        }
    }

    /// Counts a device node, fifo or socket.
    pub fn add_special(&mut self) {
        self.specials += 1;
    }

    /// Counts another name of an already counted file.
    pub fn add_hardlink(&mut self) {
        self.hardlinks += 1;
    }

    /// Counts the xattrs of one inode, given as (name length, value length).
    pub fn add_xattrs(&mut self, l: &Layout, attrs: &[(usize, usize)]) {
        if attrs.is_empty() {
            return;
        }
        self.xattrs += attrs.len() as u64;
        let short: u64 = 4 + attrs.iter().map(|&(n, v)| 3 + (n + v) as u64).sum::<u64>();
        if short <= l.literal() / 2 {
            return;
        }
        // Leaf entries are about 8 bytes of index plus a padded local
        // name/value; values over ~3/4 of a block go to remote blocks.
        let remote_limit = l.block_size * 3 / 4;
        let mut local = 0u64;
        let mut remote = 0u64;
        for &(n, v) in attrs {
            let (n, v) = (n as u64, v as u64);
            if v > remote_limit {
                local += 8 + (n + 12).next_multiple_of(4);
                remote += v.div_ceil(l.block_size - 56);
            } else {
                local += 8 + (n + v + 4).next_multiple_of(4);
            }
        }
        let leaves = local.div_ceil(l.block_size - 80);
        self.xattr_blocks += leaves + u64::from(leaves > 1) + remote;
    }

    /// Blocks everything but the inodes needs.
    pub fn content_blocks(&self) -> u64 {
        self.data_blocks
            + self.dir_blocks
            + self.xattr_blocks
            + self.symlink_blocks
            + self.bmbt_blocks
    }

    /// Blocks of inode chunks and inode btrees for every inode, given
    /// `agcount` AGs (each may hold a partly used chunk).
    pub fn inode_blocks(&self, l: &Layout, agcount: u64) -> u64 {
        let chunks = self.inodes().div_ceil(CHUNK_INODES) + agcount;
        let chunk_blocks = l.blocks(CHUNK_INODES * l.inode_size).max(1);
        let per_btree_block = (l.block_size - 56) / 16;
        chunks * chunk_blocks + 2 * (chunks.div_ceil(per_btree_block) + agcount)
    }
}

/// `--size`: how big the image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SizeSpec {
    /// The smallest size that fits, plus slack (at least [`MIN_IMAGE_BYTES`]).
    #[default]
    Auto,
    /// Exactly this many bytes.
    Fixed(u64),
}

/// Parses `auto` or a size with mkfs suffixes (`k m g t p`, binary).
pub fn parse_size(text: &str) -> Result<SizeSpec> {
    if text == "auto" {
        return Ok(SizeSpec::Auto);
    }
    match convert_size(text, 0, 512) {
        Some(v) if v > 0 => Ok(SizeSpec::Fixed(v as u64)),
        _ => Err(Error::Invalid(format!(
            "--size takes 'auto' or a size like 512m or 2g, not {text:?}"
        ))),
    }
}

/// `--slack`: free room added to an auto size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slack {
    /// Percent of the needed blocks.
    pub percent: u64,
    /// Bytes on top.
    pub bytes: u64,
}

impl Default for Slack {
    fn default() -> Slack {
        Slack {
            percent: 10,
            bytes: 16 << 20,
        }
    }
}

/// Parses `PCT%`, `SIZE` or `PCT%+SIZE` (for example `10%+16m`, `0`).
pub fn parse_slack(text: &str) -> Result<Slack> {
    let bad = || {
        Error::Invalid(format!(
            "--slack takes PCT%, SIZE or PCT%+SIZE, not {text:?}"
        ))
    };
    let mut s = Slack {
        percent: 0,
        bytes: 0,
    };
    for term in text.split('+') {
        if let Some(p) = term.strip_suffix('%') {
            s.percent = p.trim().parse().map_err(|_| bad())?;
        } else {
            let v = convert_size(term.trim(), 0, 512).ok_or_else(bad)?;
            s.bytes = u64::try_from(v).map_err(|_| bad())?;
        }
    }
    Ok(s)
}

/// The blocks the census needs from a filesystem of `agcount` AGs, slack
/// included.
pub fn needed_blocks(c: &Census, l: &Layout, slack: &Slack, agcount: u64) -> u64 {
    let base = c.content_blocks() + c.inode_blocks(l, agcount);
    base + base * slack.percent / 100 + slack.bytes.div_ceil(l.block_size)
}

fn geometry_for(opts: &MkfsOptions, bytes: u64) -> Result<MkfsGeometry> {
    let mut o = opts.clone();
    o.data_size = Some(bytes.to_string());
    compute_geometry(&o, bytes, TargetKind::File).map_err(|e| Error::Invalid(e.to_string()))
}

/// True when a filesystem of geometry `g` holds the census with slack.
pub fn fits(c: &Census, g: &MkfsGeometry, slack: &Slack) -> bool {
    let l = Layout::from_geometry(g);
    let need = needed_blocks(c, &l, slack, u64::from(g.agcount));
    let max_inodes = g.dblocks * u64::from(g.imax_pct) / 100 * u64::from(g.inopblock);
    g.fdblocks >= need && (g.imax_pct == 0 || max_inodes >= c.inodes() + CHUNK_INODES)
}

/// The smallest image size in bytes (a multiple of 1 MiB, at least
/// [`MIN_IMAGE_BYTES`]) whose fresh filesystem holds the census plus slack.
pub fn auto_size(c: &Census, opts: &MkfsOptions, slack: &Slack) -> Result<u64> {
    let l = Layout::for_options(opts)?;
    let mut bytes = (needed_blocks(c, &l, slack, 4) * l.block_size).max(MIN_IMAGE_BYTES);
    for _ in 0..64 {
        bytes = bytes.next_multiple_of(ROUND_BYTES);
        let g = geometry_for(opts, bytes)?;
        if fits(c, &g, slack) {
            return Ok(bytes);
        }
        let need = needed_blocks(c, &l, slack, u64::from(g.agcount));
        let short_blocks = need.saturating_sub(g.fdblocks);
        let inode_bytes = (c.inodes() + CHUNK_INODES) * l.inode_size;
        let for_inodes = inode_bytes * 100 / u64::from(g.imax_pct.max(1));
        // Grow by the shortfall plus the overhead it brings (5%), at least 1 MiB.
        let grown = bytes + short_blocks * l.block_size + short_blocks * l.block_size / 20;
        bytes = grown.max(for_inodes).max(bytes + ROUND_BYTES);
    }
    Err(Error::Invalid(
        "could not find an image size that holds the source".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            block_size: 4096,
            dir_block_size: 4096,
            inode_size: 512,
        }
    }

    #[test]
    fn small_tree_gets_the_floor() {
        let l = layout();
        let mut c = Census::default();
        c.add_dir(&l, 3, 20);
        c.add_file(&l, [(0, 100)]);
        let size = auto_size(&c, &MkfsOptions::default(), &Slack::default()).unwrap();
        assert_eq!(size, MIN_IMAGE_BYTES);
    }

    #[test]
    fn large_tree_fits_and_is_not_wasteful() {
        let l = layout();
        let mut c = Census::default();
        for _ in 0..200 {
            c.add_dir(&l, 1000, 12_000);
        }
        for _ in 0..200_000 {
            c.add_file(&l, [(0, 4096)]);
        }
        let size = auto_size(&c, &MkfsOptions::default(), &Slack::default()).unwrap();
        let g = geometry_for(&MkfsOptions::default(), size).unwrap();
        assert!(fits(&c, &g, &Slack::default()));
        // 200k blocks of data + 100 MB of inodes: well under 2 GiB.
        assert!(size < 2 << 30, "{size}");
        assert!(size > 800 << 20, "{size}");
    }

    #[test]
    fn parsing() {
        assert_eq!(parse_size("auto").unwrap(), SizeSpec::Auto);
        assert_eq!(parse_size("2g").unwrap(), SizeSpec::Fixed(2 << 30));
        assert!(parse_size("2x").is_err());
        assert_eq!(
            parse_slack("5%+1m").unwrap(),
            Slack {
                percent: 5,
                bytes: 1 << 20
            }
        );
        assert_eq!(
            parse_slack("0").unwrap(),
            Slack {
                percent: 0,
                bytes: 0
            }
        );
    }

    #[test]
    fn sparse_segments_count_only_data() {
        let l = layout();
        let mut c = Census::default();
        c.add_file(&l, [(0, 4096), (1 << 30, 4096)]);
        assert_eq!(c.data_blocks, 2);
        assert_eq!(c.data_bytes, 8192);
    }
}
