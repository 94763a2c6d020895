//! The write engine as a [`BuildTarget`]: every call is one namespace
//! operation on an open, writable [`Fs`].

use super::target::{BuildTarget, Meta, NodeKind};
use crate::dev::AlignedBuf;
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;

/// Builds into a writable filesystem.
pub struct FsTarget<'a> {
    fs: &'a Fs,
}

impl<'a> FsTarget<'a> {
    /// A target writing into `fs` (opened with `Fs::open_rw`).
    pub fn new(fs: &'a Fs) -> FsTarget<'a> {
        FsTarget { fs }
    }
}

impl BuildTarget for FsTarget<'_> {
    fn root(&self) -> Ino {
        self.fs.geometry().root_ino
    }

    fn lookup(&mut self, dir: Ino, name: &[u8]) -> Result<Option<Ino>> {
        crate::dir::lookup(self.fs, &self.fs.inode(dir)?, name)
    }

    fn fs(&self) -> Option<&Fs> {
        Some(self.fs)
    }

    fn create(&mut self, parent: Ino, name: &[u8], kind: &NodeKind, meta: &Meta) -> Result<Ino> {
        self.fs.create(parent, name, kind, meta)
    }

    fn write_data(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<()> {
        self.fs.write_at_opt(ino, offset, data, false)
    }

    fn write_owned(&mut self, ino: Ino, offset: u64, data: AlignedBuf) -> Result<()> {
        self.fs.write_owned(ino, offset, data, false)
    }

    fn link(&mut self, parent: Ino, name: &[u8], target: Ino) -> Result<()> {
        self.fs.link(parent, name, target)
    }

    fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> Result<()> {
        self.fs.set_xattr_opt(ino, name, value, false)
    }

    fn set_meta(&mut self, ino: Ino, meta: &Meta) -> Result<()> {
        self.fs.set_meta(ino, meta)
    }

    fn create_file(
        &mut self,
        parent: Ino,
        name: &[u8],
        meta: &Meta,
        data: &[u8],
        xattrs: &[(&[u8], &[u8])],
    ) -> Result<Ino> {
        self.fs.create_file(parent, name, meta, data, xattrs)
    }
}
