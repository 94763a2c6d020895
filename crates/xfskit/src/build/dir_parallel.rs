//! A directory source fed through worker threads ([`super::workers`]):
//! this thread takes the walk's steps in order, creates the directories
//! itself and hands every other entry to the worker of its parent
//! directory's AG. Hard links are keyed by the source's (device, inode);
//! a link to a file a worker has yet to create waits for the workers to
//! drain. Directories are made, and their metadata set after their last
//! child, by jobs too ([`Pool::mkdir`], [`Job::SetMeta`]), so this thread
//! never waits for a directory.

use std::collections::HashMap;

use super::dir_walk::{Data, Step};
use super::feed::{check_name, FeedOptions, FeedStats, CHUNK_BYTES};
use super::source_dir::{copy_data, kind_of, meta_of};
use super::target::{Meta, NodeKind};
use super::workers::{Dir, Job, Pool, Xattrs};
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
    let root = Dir::Made(fs.geometry().root_ino);
    let mut stats = FeedStats::default();
    let mut open: Vec<(Dir, Meta)> = Vec::new();
    // Hard-linked files: `None` while a worker has yet to create it.
    let mut links: HashMap<Vec<u8>, Option<Ino>> = HashMap::new();
    while let Some(step) = next()? {
        match step {
            Step::Enter(mut e) => {
                let meta = meta_of(&e.st, opts);
                let xattrs = mapped(opts, &e.xattrs);
                stats.xattrs += xattrs.len() as u64;
                let dir = match open.last() {
                    None => {
                        if !xattrs.is_empty() {
                            let job = Job::SetXattrs { dir: root, xattrs };
                            pool.push(pool.worker_for(root), job)?;
                        }
                        root
                    }
                    Some(&(parent, _)) => {
                        check_name(&e.name, &e.path.display())?;
                        let name = std::mem::take(&mut e.name);
                        pool.mkdir(parent, name, meta.clone(), xattrs)?
                    }
                };
                stats.dirs += 1;
                open.push((dir, meta));
            }
            Step::Leave => {
                // A directory's times are set after its last child, as in
                // the sequential feed, while its inode is still pending
                // with its neighbours (set at the very end instead, every
                // directory inode would be written back on its own).
                // A directory made with these times keeps them when the
                // engine keeps directory times: only the root (made by
                // mkfs) needs them set.
                if let Some((dir, meta)) = open.pop() {
                    if dir == root || !fs.keeps_dir_times() {
                        pool.push(pool.worker_for(dir), Job::SetMeta { dir, meta })?;
                    }
                }
            }
            Step::Leaf(mut e) => {
                let parent = open.last().map_or(root, |d| d.0);
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
                let xattrs = mapped(opts, &e.xattrs);
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
                            data: data.into(),
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

/// Xattrs with the ids inside ACLs mapped.
fn mapped(opts: &FeedOptions<'_>, xattrs: &[(Vec<u8>, Vec<u8>)]) -> Xattrs {
    xattrs
        .iter()
        .map(|(n, v)| {
            let v = opts.ids.map_xattr(n, v).unwrap_or_else(|| v.clone());
            (n.clone(), v)
        })
        .collect()
}
