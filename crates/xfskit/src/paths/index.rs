//! The names of every inode from one pass over every directory, for
//! filesystems without parent pointers (as xfs_ncheck finds them): each
//! entry becomes a record (child, directory, the directory's generation,
//! where its name is), sorted by child with the check's bounded-memory
//! sorter ([`crate::spill`]), so that an inode's names are found by a
//! binary search.
//!
//! Memory is bounded: past the budget the sorter spills sorted runs to an
//! unlinked temporary file, the names go to another, and the merged
//! records are written to a third, of which only every [`STRIDE`]th
//! child stays in memory; a lookup then reads a stride of records and the
//! names it needs.

use crate::bytes::{be32, be64, put_be32, put_be64};
use crate::dir;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::scan::{self, BulkstatOptions};
use crate::spill::{Rec, Sorter, SpillConfig};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Records of the merged file per entry of the in-memory index.
const STRIDE: usize = 128;

/// One name of an inode: the name, the directory that holds it and that
/// directory's generation.
pub type Parent = (Vec<u8>, u64, u32);

/// A directory entry as indexed: ordered by the inode it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    child: u64,
    dir: u64,
    name_at: u64,
    gen: u32,
    name_len: u8,
}

impl Rec for Entry {
    const SIZE: usize = 29;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.child);
        put_be64(b, 8, self.dir);
        put_be64(b, 16, self.name_at);
        put_be32(b, 24, self.gen);
        b[28] = self.name_len;
    }
    fn get(b: &[u8]) -> Self {
        Entry {
            child: be64(b, 0),
            dir: be64(b, 8),
            name_at: be64(b, 16),
            gen: be32(b, 24),
            name_len: b[28],
        }
    }
}

/// Bytes appended in order, kept in memory up to a bound and then in an
/// unlinked temporary file: the names, and the merged records.
struct Blob {
    mem: Vec<u8>,
    file: Option<File>,
    /// Bytes in the file; offsets past it are in `mem`.
    flushed: u64,
    cap: usize,
    dir: Option<std::path::PathBuf>,
}

impl Blob {
    fn new(cap: usize, dir: Option<std::path::PathBuf>) -> Blob {
        Blob {
            mem: Vec::new(),
            file: None,
            flushed: 0,
            cap,
            dir,
        }
    }

    /// Appends `b`, returning where it starts.
    fn push(&mut self, b: &[u8]) -> Result<u64> {
        let at = self.flushed + self.mem.len() as u64;
        self.mem.extend_from_slice(b);
        if self.mem.len() >= self.cap {
            self.flush()?;
        }
        Ok(at)
    }

    fn flush(&mut self) -> Result<()> {
        if self.file.is_none() {
            self.file = Some(match &self.dir {
                Some(d) => tempfile::tempfile_in(d)?,
                None => tempfile::tempfile()?,
            });
        }
        let f = self.file.as_ref().expect("just made");
        f.write_all_at(&self.mem, self.flushed)?;
        self.flushed += self.mem.len() as u64;
        self.mem.clear();
        Ok(())
    }

    #[cfg(test)]
    fn len(&self) -> u64 {
        self.flushed + self.mem.len() as u64
    }

    /// `n` bytes at `at`, which the blob holds.
    fn read(&self, at: u64, n: usize, out: &mut Vec<u8>) -> Result<()> {
        out.resize(n, 0);
        let mut done = 0;
        if at < self.flushed {
            let k = n.min((self.flushed - at) as usize);
            let f = self.file.as_ref().expect("flushed bytes are in the file");
            f.read_exact_at(&mut out[..k], at)?;
            done = k;
            if done == n {
                return Ok(());
            }
        }
        let from = (at + done as u64 - self.flushed) as usize;
        let rest = n - done;
        let src = self
            .mem
            .get(from..from + rest)
            .ok_or_else(|| Error::Invalid(format!("name index: {n} bytes at {at} past its end")))?;
        out[done..].copy_from_slice(src);
        Ok(())
    }
}

/// Every directory entry of a filesystem by the inode it names.
pub struct NameIndex {
    names: Blob,
    /// The sorted records.
    recs: Blob,
    /// The child of every [`STRIDE`]th record.
    sparse: Vec<u64>,
    entries: u64,
}

impl NameIndex {
    /// Reads every directory of `fs` (every allocated inode is scanned,
    /// `threads` at a time, 0 for one per CPU) and indexes its entries in
    /// about `budget` bytes of memory; the rest goes to temporary files in
    /// `tmpdir` (the system's when None).
    pub fn build(
        fs: &Fs,
        threads: usize,
        budget: usize,
        tmpdir: Option<std::path::PathBuf>,
    ) -> Result<NameIndex> {
        let budget = budget.max(1 << 20);
        let config = SpillConfig {
            dir: tmpdir.clone(),
        };
        let state = Mutex::new((
            Sorter::<Entry>::new(budget / 2, config),
            Blob::new(budget / 4, tmpdir.clone()),
        ));
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        let fail = |e: Error| {
            failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        };
        let opts = BulkstatOptions {
            threads,
            ..Default::default()
        };
        scan::bulkstat(fs, &opts, |batch| {
            // The entries of this batch's directories, then added at once.
            let mut local: Vec<(u64, u64, u32, Vec<u8>)> = Vec::new();
            for b in batch {
                if b.mode & 0o170000 != 0o040000 {
                    continue;
                }
                let r = fs.inode(Ino(b.ino)).and_then(|d| {
                    dir::for_each_entry(fs, &d, 0, &mut |e| {
                        if e.name != b"." && e.name != b".." {
                            local.push((e.ino.0, b.ino, d.gen, e.name));
                        }
                        true
                    })
                });
                if let Err(e) = r {
                    return fail(e);
                }
            }
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            let (sorter, names) = &mut *st;
            for (child, dir, gen, name) in local {
                let r = names.push(&name).and_then(|name_at| {
                    let e = Entry {
                        child,
                        dir,
                        name_at,
                        gen,
                        name_len: name.len().min(255) as u8,
                    };
                    sorter.push(e).map_err(Error::Io)
                });
                if let Err(e) = r {
                    return fail(e);
                }
            }
        })?;
        if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let (sorter, names) = state.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut sorted = sorter.into_sorted()?;
        let mut recs = Blob::new(budget / 4, tmpdir);
        let mut sparse = Vec::new();
        let mut entries = 0u64;
        let mut b = [0u8; Entry::SIZE];
        while let Some(e) = sorted.next_rec()? {
            if entries.is_multiple_of(STRIDE as u64) {
                sparse.push(e.child);
            }
            e.put(&mut b);
            recs.push(&b)?;
            entries += 1;
        }
        Ok(NameIndex {
            names,
            recs,
            sparse,
            entries,
        })
    }

    /// Directory entries indexed.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Whether part of the index went to temporary files.
    pub fn spilled(&self) -> bool {
        self.recs.file.is_some() || self.names.file.is_some()
    }

    /// Every name of inode `child`, in (directory, name) order.
    pub fn parents(&self, child: u64) -> Result<Vec<Parent>> {
        let mut out = Vec::new();
        // The stride before the first that starts at or above `child`:
        // its last records may be `child`'s.
        let mut i = self
            .sparse
            .partition_point(|&c| c < child)
            .saturating_sub(1);
        let mut buf = Vec::new();
        let mut name = Vec::new();
        while i < self.sparse.len() {
            let first = (i * STRIDE) as u64;
            let n = (self.entries - first).min(STRIDE as u64) as usize;
            self.recs
                .read(first * Entry::SIZE as u64, n * Entry::SIZE, &mut buf)?;
            for r in buf.chunks_exact(Entry::SIZE) {
                let e = Entry::get(r);
                if e.child > child {
                    return Ok(out);
                }
                if e.child == child {
                    self.names
                        .read(e.name_at, usize::from(e.name_len), &mut name)?;
                    out.push((name.clone(), e.dir, e.gen));
                }
            }
            i += 1;
        }
        Ok(out)
    }
}

/// Flushes a blob made for a test to its file, so that reads cross the
/// edge between the file and memory.
#[cfg(test)]
fn flushed(mut b: Blob) -> Blob {
    b.flush().unwrap();
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_reads_across_file_and_memory() {
        let mut b = Blob::new(10, None);
        let mut at = Vec::new();
        for i in 0..50u8 {
            at.push(b.push(&[i; 3]).unwrap());
        }
        assert!(b.file.is_some() && !b.mem.is_empty(), "part in each");
        let mut out = Vec::new();
        for (i, &a) in at.iter().enumerate() {
            b.read(a, 3, &mut out).unwrap();
            assert_eq!(out, [i as u8; 3]);
        }
        b.read(at[3], 30, &mut out).unwrap();
        assert_eq!(out[0], 3);
        assert_eq!(out[29], 12);
        assert!(b.read(b.len(), 1, &mut out).is_err());
        let b = flushed(b);
        b.read(at[49], 3, &mut out).unwrap();
        assert_eq!(out, [49; 3]);
    }

    #[test]
    fn lookups_find_every_name_across_strides() {
        // Children with many names and with none, records spread over many
        // strides, a blob small enough to go to files.
        let mut names = Blob::new(64, None);
        let mut recs = Blob::new(256, None);
        let mut want: std::collections::BTreeMap<u64, Vec<Parent>> = Default::default();
        let mut all = Vec::new();
        for child in (0..3000u64).filter(|c| c % 7 != 3) {
            for k in 0..(child % 5 + 1) {
                let name = format!("n{child}-{k}").into_bytes();
                let name_at = names.push(&name).unwrap();
                let e = Entry {
                    child,
                    dir: 100 + k,
                    name_at,
                    gen: k as u32,
                    name_len: name.len() as u8,
                };
                all.push(e);
                want.entry(child)
                    .or_default()
                    .push((name, 100 + k, k as u32));
            }
        }
        all.sort();
        let mut sparse = Vec::new();
        let mut b = [0u8; Entry::SIZE];
        for (i, e) in all.iter().enumerate() {
            if i % STRIDE == 0 {
                sparse.push(e.child);
            }
            e.put(&mut b);
            recs.push(&b).unwrap();
        }
        let idx = NameIndex {
            names,
            recs,
            sparse,
            entries: all.len() as u64,
        };
        assert!(idx.spilled());
        for child in 0..3001u64 {
            let got = idx.parents(child).unwrap();
            assert_eq!(
                got,
                want.get(&child).cloned().unwrap_or_default(),
                "{child}"
            );
        }
    }
}
