//! The parallel side of the tar feed ([`super::source_tar`]): what the
//! reading thread hands to the workers ([`super::workers`]), and the
//! waits that keep the result the sequential feed's.

use super::feed::storable_xattr;
use super::source_tar::{split, Tree};
use super::tar_parsed::Entries;
use super::tar_reader::TarEntry;
use super::target::{Meta, NodeKind};
use super::workers::{Dir, Job, Pool, Xattrs};
use crate::dev::{AlignedBuf, FileData};
use crate::error::Result;
use crate::geometry::Ino;

impl Tree<'_, '_> {
    /// The entry's storable xattrs, ids inside ACLs mapped.
    pub(super) fn mapped_xattrs(&self, e: &TarEntry) -> Xattrs {
        e.xattrs
            .iter()
            .filter(|(n, _)| storable_xattr(n))
            .map(|(n, v)| {
                let v = self.opts.ids.map_xattr(n, v).unwrap_or_else(|| v.clone());
                (n.clone(), v)
            })
            .collect()
    }

    /// The inode of earlier non-directory `path`: its directory from the
    /// map of directories, its inode read back from that directory (once
    /// the directory's worker has run everything queued for it). `None`
    /// when no earlier entry made it, or when it is a directory.
    pub(super) fn link_target(&mut self, path: &[u8]) -> Result<Option<Ino>> {
        if path.is_empty() || self.dirs.contains_key(path) {
            return Ok(None);
        }
        let (parent, name) = split(path);
        let Some(&(dir, _)) = self.dirs.get(parent) else {
            return Ok(None);
        };
        let dir = match self.pool {
            Some(pool) => {
                pool.settle(pool.worker_for(dir))?;
                pool.resolve(dir)?
            }
            None => self.ino(dir)?,
        };
        self.t.lookup(dir, name)
    }

    /// Parallel feed: hands a non-directory to the worker of its parent's
    /// AG; file data (read here) follows in chunks.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch(
        &mut self,
        pool: &Pool<'_>,
        r: &mut dyn Entries,
        e: &TarEntry,
        path: Vec<u8>,
        parent: Dir,
        kind: NodeKind,
        meta: Meta,
        buf: &mut [u8],
    ) -> Result<()> {
        let w = pool.worker_for(parent);
        let name = split(&path).1.to_vec();
        let xattrs = self.mapped_xattrs(e);
        self.stats.xattrs += xattrs.len() as u64;
        match kind {
            NodeKind::File { .. } if e.sparse.is_none() && e.size <= buf.len() as u64 => {
                // Read ahead into a vector of its own by the parsing
                // thread; else read into the reused buffer, then copied.
                let mut data = FileData::default();
                if let Some(v) = r.take_whole()? {
                    data = v;
                } else {
                    r.data(e, buf, &mut |_, d| {
                        // Room for the zeros to the block's end: the engine
                        // queues the vector itself.
                        let mut v = Vec::with_capacity(d.len().next_multiple_of(4096));
                        v.extend_from_slice(d);
                        data = FileData::Owned(v);
                        Ok(())
                    })?;
                }
                self.stats.files += 1;
                self.stats.bytes += e.size;
                let job = Job::File {
                    parent,
                    name,
                    key: None,
                    meta,
                    data,
                    xattrs,
                };
                return pool.push(w, job);
            }
            NodeKind::File { .. } => self.stats.files += 1,
            NodeKind::Symlink(_) => self.stats.symlinks += 1,
            _ => self.stats.specials += 1,
        }
        let is_file = matches!(kind, NodeKind::File { .. });
        let job = Job::Create {
            parent,
            name,
            key: None,
            kind,
            meta,
            xattrs,
        };
        pool.push(w, job)?;
        if is_file {
            let stats = &mut self.stats;
            r.data(e, buf, &mut |offset, data| {
                stats.bytes += data.len() as u64;
                let mut buf = crate::dev::aligned::take(data.len());
                if !buf.extend_from_slice(data) {
                    buf = AlignedBuf::copy_of(data);
                }
                pool.push(w, Job::Data { offset, data: buf })
            })?;
        }
        Ok(())
    }
}
