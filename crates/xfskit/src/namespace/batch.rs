//! Several small regular files of one directory created in one
//! transaction: what [`Fs::create_file`] does for each, with the
//! transaction's cost (locks, commit, publishing the changed buffers, the
//! lookups of the directory's and the allocation btrees' blocks) paid once
//! for the batch instead of once per file.

use super::build::{map_data, CREATE_DATA_MAX, CREATE_XATTRS_MAX};
use super::{Meta, NodeKind};
use crate::dev::FileData;
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::trans::Trans;

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

/// One file for [`Fs::create_files_owned`]: [`NewFile`] with its parts
/// handed over.
pub struct NewFileOwned {
    /// Its name in the directory.
    pub name: Vec<u8>,
    /// Owner, mode and times.
    pub meta: Meta,
    /// All of its contents.
    pub data: FileData,
    /// Extended attributes (full Linux names).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
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
        if !one_transaction(files) || self.makes_realtime_files(parent)? {
            return files
                .iter()
                .map(|f| self.create_file(parent, f.name, f.meta, f.data, f.xattrs))
                .collect();
        }
        for f in files {
            self.quota_prepare_create(parent, f.meta.uid, f.meta.gid)?;
        }
        let mut tp = self.trans()?;
        let (inos, runs) = self.create_mapped(&mut tp, parent, files)?;
        // Data goes to the allocated blocks only once nothing can fail
        // before the commit.
        for (f, r) in files.iter().zip(&runs) {
            self.queue_data(r, f.data)?;
        }
        tp.commit()?;
        Ok(inos)
    }

    /// [`Fs::create_files`] for files whose data the caller hands over:
    /// a file whose blocks are one extent has its vector queued as it is
    /// (padded to whole blocks), not copied.
    pub fn create_files_owned(&self, parent: Ino, files: Vec<NewFileOwned>) -> Result<Vec<Ino>> {
        for f in &files {
            self.quota_prepare_create(parent, f.meta.uid, f.meta.gid)?;
        }
        let mut tp = self.trans()?;
        let (inos, runs) = {
            let x: Vec<Vec<(&[u8], &[u8])>> = files
                .iter()
                .map(|f| f.xattrs.iter().map(|(n, v)| (&n[..], &v[..])).collect())
                .collect();
            let refs: Vec<NewFile<'_>> = files
                .iter()
                .zip(&x)
                .map(|(f, x)| NewFile {
                    name: &f.name,
                    meta: &f.meta,
                    data: f.data.as_slice(),
                    xattrs: x,
                })
                .collect();
            if !one_transaction(&refs) || self.makes_realtime_files(parent)? {
                drop(tp);
                return self.create_files(parent, &refs);
            }
            self.create_mapped(&mut tp, parent, &refs)?
        };
        for (f, r) in files.into_iter().zip(&runs) {
            match (r.as_slice(), f.data) {
                ([(0, disk, len)], FileData::Owned(mut v)) if v.len() as u64 <= *len => {
                    v.resize(*len as usize, 0);
                    self.write_data_vec(*disk, v)?;
                }
                ([(0, disk, len)], FileData::Shared(b))
                    if b.padded().len() as u64 <= *len
                        && *len as usize - b.padded().len() <= crate::dev::aligned::ZEROS_MAX =>
                {
                    let zeros = *len as usize - b.padded().len();
                    self.write_data_shared(*disk, b, zeros)?;
                }
                (_, data) => self.queue_data(r, data.as_slice())?,
            }
        }
        tp.commit()?;
        Ok(inos)
    }

    /// Everything [`Fs::create_files`] does but queueing the data and
    /// committing: returns the inodes and where each file's data goes.
    #[allow(clippy::type_complexity)]
    fn create_mapped(
        &self,
        tp: &mut Trans<'_>,
        parent: Ino,
        files: &[NewFile<'_>],
    ) -> Result<(Vec<Ino>, Vec<Vec<(u64, u64, u64)>>)> {
        for f in files {
            let kind = NodeKind::File {
                size: f.data.len() as u64,
            };
            super::create::check_kind(f.name, &kind)?;
        }
        let now = self.now()?;
        let ws = self.write_state()?;
        let mut ips = Vec::with_capacity(files.len());
        tp.lock_inode(parent);
        // The directory inode is read once and logged once, after its last
        // new entry.
        let mut dp = super::create::read_dir_inode(tp, parent)?;
        // The inodes first, all at once (each inode btree record changed
        // once per chunk).
        let inos = crate::ialloc::alloc_inodes(tp, parent, 0o100000, files.len() as u32)?;
        for (f, &ino) in files.iter().zip(&inos) {
            let kind = NodeKind::File {
                size: f.data.len() as u64,
            };
            let gen = ws.next_gen();
            ips.push(self.new_inode_in(tp, &mut dp, f.name, &kind, f.meta, gen, Some(ino))?);
        }
        // The entries all at once: the directory's blocks are looked up
        // once for the batch.
        let ents: Vec<(&[u8], Ino, u8)> = files
            .iter()
            .zip(&ips)
            .map(|(f, ip)| (f.name, ip.ino, ip.file_type.dirent_code()))
            .collect();
        crate::dir::write::add_all(tp, &mut dp, &ents)?;
        self.touch_dir(&mut dp, now)?;
        tp.log_inode(&dp)?;
        // The data of all the files: one extent when the allocator has
        // one, handed out file by file (with reverse mappings, each file's
        // piece gets its own rmap record); what it could not give is
        // allocated per file.
        let bs = u64::from(self.geometry().block_size);
        let blocks: Vec<u64> = files
            .iter()
            .map(|f| (f.data.len() as u64).div_ceil(bs))
            .collect();
        let total: u64 = blocks.iter().sum();
        let mut given = None;
        if blocks.iter().filter(|&&b| b > 0).count() > 1 && total <= u64::from(u32::MAX) {
            let first = files.iter().position(|f| !f.data.is_empty()).unwrap_or(0);
            let owner = |ip: &crate::inode::Inode| crate::alloc::Owner::Inode {
                ino: ip.ino,
                attr_fork: false,
                offset: 0,
                bmbt: false,
            };
            // The pieces in the order they are handed out below.
            let pieces: Vec<(u32, crate::alloc::Owner)> = blocks
                .iter()
                .zip(&ips)
                .filter(|(&b, _)| b > 0)
                .map(|(&b, ip)| (b as u32, owner(ip)))
                .collect();
            let req = crate::alloc::AllocReq {
                target: crate::bmap::new_file_target(tp, &ips[first]),
                minlen: 1,
                maxlen: total as u32,
                alignment: 1,
                ag_only: false,
                owner: owner(&ips[first]),
            };
            given = Some(crate::alloc::alloc_extent_pieces(tp, &req, &pieces)?);
        }
        let mut runs = Vec::with_capacity(files.len());
        for (i, f) in files.iter().enumerate() {
            let ip = &mut ips[i];
            if let Some((start, left)) = given.as_mut().filter(|g| g.1 > 0 && blocks[i] > 0) {
                let n = blocks[i].min(u64::from(*left));
                crate::bmap::map_given(tp, ip, crate::inode::Fork::Data, 0, *start, n)?;
                start.0 += n;
                *left -= n as u32;
            }
            runs.push(if f.data.is_empty() {
                Vec::new()
            } else {
                map_data(tp, ip, f.data.len())?
            });
        }
        let mut inos = Vec::with_capacity(files.len());
        for (f, ip) in files.iter().zip(&mut ips) {
            for (n, v) in f.xattrs {
                super::xattr::set_xattr_in(tp, ip, n, v)?;
            }
            tp.log_inode(ip)?;
            inos.push(ip.ino);
        }
        Ok((inos, runs))
    }
}

/// True when `files` are made in one transaction (else one by one).
fn one_transaction(files: &[NewFile<'_>]) -> bool {
    let bytes: usize = files.iter().map(|f| f.data.len()).sum();
    files.len() > 1
        && files.len() <= BATCH_FILES
        && bytes <= BATCH_BYTES
        && files
            .iter()
            .all(|f| f.data.len() <= CREATE_DATA_MAX && f.xattrs.len() <= CREATE_XATTRS_MAX)
}
