//! The allocator calls of this module, with a stand-in for unit tests
//! (a private pool of blocks) so the mapping code can be exercised
//! without the free-space btrees.

use crate::alloc::{AllocReq, Owner};
use crate::error::Result;
use crate::geometry::FsBlock;
use crate::trans::Trans;

/// Allocates one extent (see [`crate::alloc::alloc_extent`]).
pub(crate) fn alloc_extent(tp: &mut Trans<'_>, req: &AllocReq) -> Result<(FsBlock, u32)> {
    #[cfg(test)]
    if let Some(r) = pool::alloc(req) {
        return r;
    }
    crate::alloc::alloc_extent(tp, req)
}

/// [`alloc_extent`] for an owner whose new mapping cannot join another of
/// its mappings: the reverse mapping goes in without neighbour searches
/// (see [`crate::alloc::alloc_extent_pieces`]).
pub(crate) fn alloc_extent_alone(tp: &mut Trans<'_>, req: &AllocReq) -> Result<(FsBlock, u32)> {
    #[cfg(test)]
    if let Some(r) = pool::alloc(req) {
        return r;
    }
    crate::alloc::alloc_extent_pieces(tp, req, &[(req.maxlen, req.owner)])
}

/// Frees one extent (see [`crate::alloc::free_extent`]).
pub(crate) fn free_extent(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
    owner: &Owner,
) -> Result<()> {
    #[cfg(test)]
    if let Some(r) = pool::free(start, len) {
        return r;
    }
    crate::alloc::free_extent(tp, start, len, owner)
}

/// Releases one owner's use of an extent that may be shared (see
/// [`crate::alloc::release_extent`]).
pub(crate) fn release_extent(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
    owner: &Owner,
) -> Result<()> {
    #[cfg(test)]
    if let Some(r) = pool::free(start, len) {
        return r;
    }
    crate::alloc::release_extent(tp, start, len, owner)
}

#[cfg(test)]
pub(crate) mod pool {
    //! A test pool of free blocks, per thread.
    use super::*;
    use crate::error::Error;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    /// Free blocks and the most blocks one allocation hands out.
    pub(crate) struct Pool {
        pub(crate) free: BTreeSet<u64>,
        pub(crate) cap: u32,
    }

    thread_local! {
        static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
    }

    /// Installs (or removes) this thread's pool.
    pub(crate) fn set(p: Option<Pool>) {
        POOL.with(|c| *c.borrow_mut() = p);
    }

    /// Runs `f` on this thread's pool.
    pub(crate) fn with<T>(f: impl FnOnce(&mut Pool) -> T) -> Option<T> {
        POOL.with(|c| c.borrow_mut().as_mut().map(f))
    }

    pub(super) fn alloc(req: &AllocReq) -> Option<Result<(FsBlock, u32)>> {
        with(|p| {
            let start = if p.free.contains(&req.target.0) {
                req.target.0
            } else {
                match p.free.iter().next() {
                    Some(s) => *s,
                    None => return Err(Error::NoSpace("test pool empty".into())),
                }
            };
            let mut n = 0u32;
            while n < req.maxlen.min(p.cap) && p.free.remove(&(start + u64::from(n))) {
                n += 1;
            }
            Ok((FsBlock(start), n))
        })
    }

    pub(super) fn free(start: FsBlock, len: u32) -> Option<Result<()>> {
        with(|p| {
            for b in start.0..start.0 + u64::from(len) {
                if !p.free.insert(b) {
                    return Err(Error::Invalid(format!("double free of block {b}")));
                }
            }
            Ok(())
        })
    }
}
