//! FUSE adapter for xfskit.
