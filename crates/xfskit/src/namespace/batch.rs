//! Several small regular files of one directory created in one
//! transaction: what [`Fs::create_file`] does for each, with the
//! transaction's cost (locks, commit, publishing the changed buffers, the
//! lookups of the directory's and the allocation btrees' blocks) paid once
//! for the batch instead of once per file.

use super::build::{map_data, CREATE_DATA_MAX, CREATE_XATTRS_MAX};
use crate::build::{Meta, NodeKind};
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;

/// One file for [`Fs::create_files`].
#[derive(Clone, Copy)]
pub struct NewFile<'a> {
    /// Its name in the directory.
    pub name: &'a [u8],
    /// Owner, mode and times.
    pub meta: &'a Meta,
    /// All of its contents.
    pub data: &'a [u8],
    /// Extended attributes (full Linux names).
    pub xattrs: &'a [(&'a [u8], &'a [u8])],
}

/// Most files created in one transaction (bounds the transaction, as a
/// journal will need).
pub const BATCH_FILES: usize = 32;

/// Most bytes of data created in one transaction.
pub const BATCH_BYTES: usize = 1 << 20;

impl Fs {
    /// Creates `files` in directory `parent`, in this order, and returns
    /// their inodes. A batch of at most [`BATCH_FILES`] files and
    /// [`BATCH_BYTES`] of data (each file within [`Fs::create_file`]'s
    /// one-transaction limits) is one transaction: all of the files are
    /// created, or none (the error of the first that failed). Larger
    /// batches are created file by file. The result is the same as
    /// [`Fs::create_file`] for each file in turn.
    pub fn create_files(&self, parent: Ino, files: &[NewFile<'_>]) -> Result<Vec<Ino>> {
        let bytes: usize = files.iter().map(|f| f.data.len()).sum();
        let one_trans = files.len() > 1
            && files.len() <= BATCH_FILES
            && bytes <= BATCH_BYTES
            && files
                .iter()
                .all(|f| f.data.len() <= CREATE_DATA_MAX && f.xattrs.len() <= CREATE_XATTRS_MAX);
        if !one_trans {
            return files
                .iter()
                .map(|f| self.create_file(parent, f.name, f.meta, f.data, f.xattrs))
                .collect();
        }
        for f in files {
            let kind = NodeKind::File {
                size: f.data.len() as u64,
            };
            super::create::check_kind(f.name, &kind)?;
        }
        let now = self.now()?;
        let ws = self.write_state()?;
        let mut tp = self.trans()?;
        let mut ips = Vec::with_capacity(files.len());
        tp.lock_inode(parent);
        // The directory inode is read once and logged once, after its last
        // new entry.
        let mut dp = super::create::read_dir_inode(&mut tp, parent)?;
        for f in files {
            let kind = NodeKind::File {
                size: f.data.len() as u64,
            };
            let gen = ws.next_gen();
            ips.push(self.create_in_dir(&mut tp, &mut dp, f.name, &kind, f.meta, now, gen)?);
        }
        tp.log_inode(&dp)?;
        // The data of all the files: one extent when the allocator has
        // one, handed out file by file; what it could not give, and every
        // file when reverse mappings are kept (each file needs its own
        // rmap record), is allocated per file.
        let bs = u64::from(self.geometry().block_size);
        let blocks: Vec<u64> = files
            .iter()
            .map(|f| (f.data.len() as u64).div_ceil(bs))
            .collect();
        let total: u64 = blocks.iter().sum();
        let mut given = None;
        if !self.geometry().features.rmapbt && blocks.iter().filter(|&&b| b > 0).count() > 1 {
            let first = files.iter().position(|f| !f.data.is_empty()).unwrap_or(0);
            let req = crate::alloc::AllocReq {
                target: crate::bmap::new_file_target(&tp, &ips[first]),
                minlen: 1,
                maxlen: total.min(u64::from(u32::MAX)) as u32,
                alignment: 1,
                ag_only: false,
                owner: crate::alloc::Owner::Inode {
                    ino: ips[first].ino,
                    attr_fork: false,
                    offset: 0,
                    bmbt: false,
                },
            };
            given = Some(crate::alloc::alloc_extent(&mut tp, &req)?);
        }
        let mut runs = Vec::with_capacity(files.len());
        for (i, f) in files.iter().enumerate() {
            let ip = &mut ips[i];
            if let Some((start, left)) = given.as_mut().filter(|g| g.1 > 0 && blocks[i] > 0) {
                let n = blocks[i].min(u64::from(*left));
                crate::bmap::map_given(&mut tp, ip, crate::inode::Fork::Data, 0, *start, n)?;
                start.0 += n;
                *left -= n as u32;
            }
            runs.push(if f.data.is_empty() {
                Vec::new()
            } else {
                map_data(&mut tp, ip, f.data.len())?
            });
        }
        let mut inos = Vec::with_capacity(files.len());
        for (f, ip) in files.iter().zip(&mut ips) {
            for (n, v) in f.xattrs {
                super::xattr::set_xattr_in(&mut tp, ip, n, v)?;
            }
            tp.log_inode(ip)?;
            inos.push(ip.ino);
        }
        // Data goes to the allocated blocks only once nothing can fail
        // before the commit.
        for (f, r) in files.iter().zip(&runs) {
            self.queue_data(r, f.data)?;
        }
        tp.commit()?;
        Ok(inos)
    }
}
