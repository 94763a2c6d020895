//! XFS v5 on-disk structures: declarations only, no I/O.
#![forbid(unsafe_code)]
