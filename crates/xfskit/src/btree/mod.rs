//! One btree engine for every XFS btree: the short-pointer AG btrees
//! (bnobt, cntbt, inobt, finobt, rmapbt, refcountbt) and the long-pointer
//! bmbt rooted in an inode fork. A cursor walks root to leaf through
//! transaction buffers; lookups, updates, inserts (splitting blocks and
//! growing a new root) and deletes (joining or borrowing from siblings,
//! shrinking the root) keep keys in parent blocks right.
//!
//! STUB: being written.
