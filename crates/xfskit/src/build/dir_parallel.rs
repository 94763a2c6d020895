//! A directory source fed through worker threads ([`super::workers`]):
//! this thread takes the walk's steps in order, creates the directories
//! itself and hands every other entry to the worker of its parent
//! directory's AG. Hard links are keyed by the source's (device, inode);
//! a link to a file a worker has yet to create waits for the workers to
//! drain. Directories are created, and their metadata set after their
//! last child, only while the workers are idle (drained), so the layout
//! matches the sequential feed's.

use std::collections::HashMap;

use super::dir_walk::{Data, Step};
use super::feed::{check_name, set_xattr, FeedOptions, FeedStats, CHUNK_BYTES};
use super::source_dir::{copy_data, kind_of, meta_of};
use super::target::{BuildTarget, Meta, NodeKind};
use super::workers::{Job, Pool, Xattrs};
use super::FsTarget;
use crate::dev::AlignedBuf;
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;

/// The source (device, inode) of a hard-linked file, as a drain key.
fn link_key(st: &rustix::fs::Statx) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&st.stx_dev_major.to_le_bytes());
    k.extend_from_slice(&st.stx_dev_minor.to_le_bytes());
    k.extend_from_slice(&st.stx_ino.to_le_bytes());
    k
}

/// Runs the walk's steps from `next` into `fs` through `pool`; returns the
/// counts.
pub(super) fn consume(
    next: &mut dyn FnMut() -> Result<Option<Step>>,
    fs: &Fs,
    pool: &Pool<'_>,
    opts: &FeedOptions<'_>,
) -> Result<FeedStats> {
    let mut t = FsTarget::new(fs);
    let mut stats = FeedStats::default();
    let mut open: Vec<(Ino, Meta)> = Vec::new();
    // Hard-linked files: `None` while a worker has yet to create it.
    let mut links: HashMap<Vec<u8>, Option<Ino>> = HashMap::new();
    while let Some(step) = next()? {
        match step {
            Step::Enter(e) => {
                let meta = meta_of(&e.st, opts);
                let ino = match open.last() {
                    None => t.root(),
                    Some(&(parent, _)) => {
                        check_name(&e.name, &e.path.display())?;
                        // Only once the workers are idle: see
                        // source_tar's `settle`.
                        for (k, ino) in pool.drain()? {
                            links.insert(k, Some(ino));
                        }
                        t.create(parent, &e.name, &NodeKind::Dir, &meta)?
                    }
                };
                for (name, value) in &e.xattrs {
                    set_xattr(&mut t, opts.ids, ino, name, value, &mut stats)?;
                }
                stats.dirs += 1;
                open.push((ino, meta));
            }
            Step::Leave => {
                // A directory's times are set after its last child, as in
                // the sequential feed, while its inode is still pending
                // with its neighbours (set at the very end instead, every
                // directory inode would be written back on its own).
                if let Some((ino, meta)) = open.pop() {
                    for (k, ino) in pool.drain()? {
                        links.insert(k, Some(ino));
                    }
                    t.set_meta(ino, &meta)?;
                }
            }
            Step::Leaf(mut e) => {
                let parent = open.last().map_or_else(|| t.root(), |d| d.0);
                let w = pool.worker_for(parent);
                let st = e.st;
                let key = (st.stx_nlink > 1).then(|| link_key(&st));
                if let Some(k) = &key {
                    let known = match links.get(k) {
                        Some(None) => {
                            for (k, ino) in pool.drain()? {
                                links.insert(k, Some(ino));
                            }
                            links.get(k).copied().flatten()
                        }
                        other => other.copied().flatten(),
                    };
                    if let Some(target) = known {
                        let name = std::mem::take(&mut e.name);
                        pool.push(
                            w,
                            Job::Link {
                                parent,
                                name,
                                target,
                            },
                        )?;
                        stats.hardlinks += 1;
                        stats.tick(opts);
                        continue;
                    }
                    links.insert(k.clone(), None);
                }
                let kind = kind_of(&mut e)?;
                let meta = meta_of(&st, opts);
                let xattrs: Xattrs = e
                    .xattrs
                    .iter()
                    .map(|(n, v)| {
                        let v = opts.ids.map_xattr(n, v).unwrap_or_else(|| v.clone());
                        (n.clone(), v)
                    })
                    .collect();
                stats.xattrs += xattrs.len() as u64;
                let name = std::mem::take(&mut e.name);
                let data = std::mem::replace(&mut e.data, Data::None);
                let small = match (&kind, data) {
                    (NodeKind::File { .. }, Data::Whole(d)) if d.len() <= CHUNK_BYTES => Ok(d),
                    (NodeKind::File { size: 0 }, Data::None) => Ok(Vec::new()),
                    (_, data) => Err(data),
                };
                match small {
                    Ok(data) => {
                        stats.files += 1;
                        stats.bytes += data.len() as u64;
                        let job = Job::File {
                            parent,
                            name,
                            key,
                            meta,
                            data,
                            xattrs,
                        };
                        pool.push(w, job)?;
                    }
                    Err(data) => {
                        match kind {
                            NodeKind::File { .. } => stats.files += 1,
                            NodeKind::Symlink(_) => stats.symlinks += 1,
                            _ => stats.specials += 1,
                        }
                        let job = Job::Create {
                            parent,
                            name,
                            key,
                            kind,
                            meta,
                            xattrs,
                        };
                        pool.push(w, job)?;
                        let mut out = |offset: u64, data: AlignedBuf| {
                            pool.push(w, Job::Data { offset, data })
                        };
                        copy_data(&mut out, &e, data, &mut stats)?;
                    }
                }
            }
        }
        stats.tick(opts);
    }
    Ok(stats)
}
