//! [`RemoteDevice`]: a read-only [`Device`] over one object, read in
//! aligned chunks through ranged GETs and kept in a fixed-size LRU cache.
//!
//! A read takes what the cache holds, waits for chunks another thread is
//! already fetching, and fetches the rest itself: adjacent missing chunks in
//! one request (at most [`RUN_MAX_CHUNKS`] chunks), several requests in
//! flight at once on the device's own tokio runtime while the calling
//! thread blocks. `will_need` starts fetches without waiting (read-ahead),
//! bounded so that prefetched chunks never push out more than half the
//! cache.

use bytes::Bytes;
use futures::future::join_all;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use xfskit::dev::Device;

/// Chunks fetched by one request at most (with 256 KiB chunks: 8 MiB).
pub const RUN_MAX_CHUNKS: u64 = 32;

/// Counters of what a device (or every device, [`crate::totals`]) fetched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent (the HEAD of the open included).
    pub requests: u64,
    /// Bytes of object data received.
    pub bytes: u64,
    /// Chunks a read found in the cache.
    pub hits: u64,
    /// Chunks a read had to wait for or fetch.
    pub misses: u64,
}

pub(crate) struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Counters {
    pub(crate) const fn new_const() -> Counters {
        Counters {
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn request(&self, bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        crate::GLOBAL.requests.fetch_add(1, Ordering::Relaxed);
        crate::GLOBAL.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// How a remote device caches.
#[derive(Debug, Clone, Copy)]
pub struct CacheOptions {
    /// Bytes of object data kept in memory.
    pub cache_bytes: u64,
    /// The unit of fetching and caching (a power of two, 4 KiB at least).
    pub chunk_bytes: u64,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            cache_bytes: 64 << 20,
            chunk_bytes: 256 << 10,
        }
    }
}

enum Slot {
    /// Being fetched; `prefetch` when no reader asked for it yet.
    Loading { prefetch: bool },
    /// Held, last used at the tick.
    Ready { data: Bytes, used: u64 },
}

#[derive(Default)]
struct State {
    chunks: HashMap<u64, Slot>,
    ready: usize,
    tick: u64,
    /// Chunks being fetched by read-ahead alone.
    prefetching: u64,
}

pub(crate) struct Shared {
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    url: String,
    len: u64,
    etag: Option<String>,
    chunk: u64,
    max_ready: usize,
    state: Mutex<State>,
    arrived: Condvar,
    pub(crate) counters: Counters,
}

/// A read-only device over one remote object.
pub struct RemoteDevice {
    shared: Arc<Shared>,
    rt: tokio::runtime::Runtime,
}

impl RemoteDevice {
    /// Wraps the object at `path` in `store` as `meta` describes it (its
    /// size; its etag, checked on every read when the store gave one);
    /// `url` names it in errors.
    pub(crate) fn new(
        rt: tokio::runtime::Runtime,
        store: Arc<dyn ObjectStore>,
        path: ObjPath,
        url: String,
        meta: object_store::ObjectMeta,
        opts: CacheOptions,
        counters: Counters,
    ) -> RemoteDevice {
        let chunk = opts.chunk_bytes.max(4096).next_power_of_two();
        let max_ready = usize::try_from((opts.cache_bytes / chunk).max(4)).unwrap_or(usize::MAX);
        RemoteDevice {
            shared: Arc::new(Shared {
                store,
                path,
                url,
                len: meta.size,
                etag: meta.e_tag,
                chunk,
                max_ready,
                state: Mutex::new(State::default()),
                arrived: Condvar::new(),
                counters,
            }),
            rt,
        }
    }

    /// What this device fetched so far.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// The object's URL.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// Runs `fut` on the device's runtime and waits for it (from any
    /// thread, a runtime's own included, without nesting runtimes).
    fn wait<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> io::Result<T> {
        let h = self.rt.spawn(fut);
        futures::executor::block_on(h)
            .map_err(|e| io::Error::other(format!("{}: {e}", self.shared.url)))
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn chunk_range(&self, c: u64) -> Range<u64> {
        let start = c * self.chunk;
        start..(start + self.chunk).min(self.len)
    }

    /// Fetches chunks `first..first + n` in one ranged GET.
    async fn fetch_run(self: Arc<Self>, first: u64, n: u64) -> io::Result<Bytes> {
        let start = first * self.chunk;
        let end = ((first + n) * self.chunk).min(self.len);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(start..end)),
            if_match: self.etag.clone(),
            ..Default::default()
        };
        let res = async {
            let r = self.store.get_opts(&self.path, opts).await?;
            r.bytes().await
        }
        .await;
        let data = match res {
            Ok(d) => d,
            Err(e) => {
                self.counters.request(0);
                return Err(self.io_error(&e, start, end));
            }
        };
        self.counters.request(data.len() as u64);
        if data.len() as u64 != end - start {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: bytes {start}..{end}: the server sent {} bytes",
                    self.url,
                    data.len()
                ),
            ));
        }
        Ok(data)
    }

    fn io_error(&self, e: &object_store::Error, start: u64, end: u64) -> io::Error {
        let kind = match e {
            object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
            object_store::Error::Precondition { .. } => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::Other,
        };
        let what = if matches!(e, object_store::Error::Precondition { .. }) {
            "the object changed while it was being read".to_string()
        } else {
            e.to_string()
        };
        io::Error::new(
            kind,
            format!("{}: reading bytes {start}..{end}: {what}", self.url),
        )
    }

    /// Puts fetched chunks in the cache (dropping the least recently used
    /// beyond its size) and wakes the threads waiting for them.
    fn arrive(&self, st: &mut State, first: u64, data: &Bytes) {
        let n = (data.len() as u64).div_ceil(self.chunk);
        for i in 0..n {
            let c = first + i;
            let lo = (i * self.chunk) as usize;
            let hi = (((i + 1) * self.chunk) as usize).min(data.len());
            st.tick += 1;
            let slot = Slot::Ready {
                data: data.slice(lo..hi),
                used: st.tick,
            };
            match st.chunks.insert(c, slot) {
                Some(Slot::Ready { .. }) => {}
                Some(Slot::Loading { prefetch }) => {
                    st.ready += 1;
                    if prefetch {
                        st.prefetching = st.prefetching.saturating_sub(1);
                    }
                }
                None => st.ready += 1,
            }
        }
        while st.ready > self.max_ready {
            let oldest = st
                .chunks
                .iter()
                .filter_map(|(c, s)| match s {
                    Slot::Ready { used, .. } => Some((*used, *c)),
                    Slot::Loading { .. } => None,
                })
                .min();
            let Some((_, c)) = oldest else { break };
            st.chunks.remove(&c);
            st.ready -= 1;
        }
        self.arrived.notify_all();
    }

    /// Forgets chunks whose fetch failed, so that a reader fetches them
    /// again (and sees the error itself).
    fn failed(&self, st: &mut State, first: u64, n: u64) {
        for c in first..first + n {
            if let Some(Slot::Loading { prefetch }) = st.chunks.get(&c) {
                if *prefetch {
                    st.prefetching = st.prefetching.saturating_sub(1);
                }
                st.chunks.remove(&c);
            }
        }
        self.arrived.notify_all();
    }
}

/// Runs of adjacent chunks in `chunks` (sorted), each at most
/// `RUN_MAX_CHUNKS` long, as (first, count).
fn runs(chunks: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &c in chunks {
        match out.last_mut() {
            Some((f, n)) if *f + *n == c && *n < RUN_MAX_CHUNKS => *n += 1,
            _ => out.push((c, 1)),
        }
    }
    out
}

impl Device for RemoteDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let sh = &self.shared;
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= sh.len)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{}: read of {} bytes at {off} past the end ({} bytes)",
                        sh.url,
                        buf.len(),
                        sh.len
                    ),
                )
            })?;
        if buf.is_empty() {
            return Ok(());
        }
        let first = off / sh.chunk;
        let last = (end - 1) / sh.chunk;
        let mut done = vec![false; (last - first + 1) as usize];
        // Copies the part of chunk `c` that the read covers.
        let copy = |buf: &mut [u8], c: u64, data: &[u8]| {
            let r = sh.chunk_range(c);
            let lo = r.start.max(off);
            let hi = r.end.min(end);
            let src = &data[(lo - r.start) as usize..(hi - r.start) as usize];
            buf[(lo - off) as usize..(hi - off) as usize].copy_from_slice(src);
        };
        let mut counted = false;
        loop {
            let mut st = sh.lock();
            let mut missing = Vec::new();
            let mut waiting = false;
            for c in first..=last {
                let i = (c - first) as usize;
                if done[i] {
                    continue;
                }
                st.tick += 1;
                let tick = st.tick;
                match st.chunks.get_mut(&c) {
                    Some(Slot::Ready { data, used }) => {
                        *used = tick;
                        copy(buf, c, data);
                        done[i] = true;
                        if !counted {
                            sh.counters.hits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Some(Slot::Loading { .. }) => waiting = true,
                    None => missing.push(c),
                }
            }
            if !counted {
                let m = done.iter().filter(|d| !**d).count() as u64;
                sh.counters.misses.fetch_add(m, Ordering::Relaxed);
                counted = true;
            }
            if missing.is_empty() {
                if !waiting {
                    return Ok(());
                }
                drop(sh.arrived.wait(st).unwrap_or_else(|p| p.into_inner()));
                continue;
            }
            for &c in &missing {
                st.chunks.insert(c, Slot::Loading { prefetch: false });
            }
            drop(st);
            let runs = runs(&missing);
            let futs: Vec<_> = runs
                .iter()
                .map(|&(f, n)| sh.clone().fetch_run(f, n))
                .collect();
            let results = self.wait(join_all(futs))?;
            let mut st = sh.lock();
            let mut err = None;
            for (&(f, n), res) in runs.iter().zip(results) {
                match res {
                    Ok(data) => {
                        for c in f..f + n {
                            let r = sh.chunk_range(c);
                            let lo = ((c - f) * sh.chunk) as usize;
                            copy(buf, c, &data[lo..lo + (r.end - r.start) as usize]);
                            done[(c - first) as usize] = true;
                        }
                        sh.arrive(&mut st, f, &data);
                    }
                    Err(e) => {
                        sh.failed(&mut st, f, n);
                        err.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = err {
                return Err(e);
            }
        }
    }

    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(read_only(&self.shared.url))
    }

    fn write_vectored_at(&self, _bufs: &[&[u8]], _off: u64) -> io::Result<()> {
        Err(read_only(&self.shared.url))
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.shared.len
    }

    fn will_need(&self, off: u64, len: u64) {
        let sh = &self.shared;
        if off >= sh.len || len == 0 {
            return;
        }
        // Read-ahead fills at most half the cache, so that it cannot push
        // out what the reads in progress use.
        let budget = (sh.max_ready as u64 / 2).max(1);
        let end = off.saturating_add(len).min(sh.len);
        let first = off / sh.chunk;
        let last = (end - 1) / sh.chunk;
        let mut st = sh.lock();
        let mut want = Vec::new();
        for c in first..=last {
            if st.prefetching >= budget {
                break;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = st.chunks.entry(c) {
                e.insert(Slot::Loading { prefetch: true });
                st.prefetching += 1;
                want.push(c);
            }
        }
        drop(st);
        for (f, n) in runs(&want) {
            let sh = sh.clone();
            self.rt.spawn(async move {
                let res = sh.clone().fetch_run(f, n).await;
                let mut st = sh.lock();
                match res {
                    Ok(data) => sh.arrive(&mut st, f, &data),
                    Err(_) => sh.failed(&mut st, f, n),
                }
            });
        }
    }
}

fn read_only(url: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{url}: remote images are read-only"),
    )
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_merge_adjacent_chunks_up_to_the_cap() {
        assert_eq!(runs(&[1, 2, 3, 7, 9, 10]), vec![(1, 3), (7, 1), (9, 2)]);
        let many: Vec<u64> = (0..70).collect();
        assert_eq!(runs(&many), vec![(0, 32), (32, 32), (64, 6)]);
        assert!(runs(&[]).is_empty());
    }
}
