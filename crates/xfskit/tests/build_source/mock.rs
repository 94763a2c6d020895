//! A BuildTarget that records what it is told and checks the calling rules
//! of the trait: parent first, valid names, no duplicates, data in order and
//! inside the file, links only to non-directories, no child created in a
//! directory after its final metadata was set.

use std::collections::BTreeMap;

use xfskit::build::{BuildTarget, Meta, NodeKind};
use xfskit::{Error, Ino, Result};

#[derive(Debug, Clone)]
pub struct Node {
    pub kind: NodeKind,
    pub meta: Meta,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Written data segments (offset, bytes), merged when contiguous.
    pub data: Vec<(u64, Vec<u8>)>,
    pub children: BTreeMap<Vec<u8>, Ino>,
    pub meta_final: bool,
    pub nlink: u32,
}

pub struct Mock {
    pub nodes: BTreeMap<u64, Node>,
    next: u64,
    pub calls: u64,
}

fn bad(msg: String) -> Error {
    Error::Invalid(format!("mock: {msg}"))
}

impl Mock {
    pub fn new() -> Mock {
        let root = Node {
            kind: NodeKind::Dir,
            meta: Meta {
                mode: 0o755,
                uid: 0,
                gid: 0,
                atime: Default::default(),
                mtime: Default::default(),
                ctime: Default::default(),
                crtime: Default::default(),
            },
            xattrs: BTreeMap::new(),
            data: Vec::new(),
            children: BTreeMap::new(),
            meta_final: false,
            nlink: 1,
        };
        Mock {
            nodes: BTreeMap::from([(128, root)]),
            next: 129,
            calls: 0,
        }
    }

    fn node(&mut self, ino: Ino) -> Result<&mut Node> {
        self.nodes
            .get_mut(&ino.0)
            .ok_or_else(|| bad(format!("no inode {}", ino.0)))
    }

    fn add_name(&mut self, parent: Ino, name: &[u8], ino: Ino) -> Result<()> {
        if name.is_empty() || name.len() > 255 || name == b"." || name == b".." {
            return Err(bad(format!("bad name {:?}", String::from_utf8_lossy(name))));
        }
        if name.contains(&b'/') || name.contains(&0) {
            return Err(bad("name with / or NUL".into()));
        }
        let p = self.node(parent)?;
        if p.kind != NodeKind::Dir {
            return Err(bad("parent is not a directory".into()));
        }
        if p.meta_final {
            return Err(bad(
                "child created after the directory's final set_meta".into()
            ));
        }
        if p.children.contains_key(name) {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        p.children.insert(name.to_vec(), ino);
        Ok(())
    }

    /// Every path with its node, depth first in name order ("" is the root).
    pub fn paths(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut stack = vec![(String::new(), 128u64)];
        while let Some((path, ino)) = stack.pop() {
            out.push((path.clone(), ino));
            if let Some(n) = self.nodes.get(&ino) {
                for (name, child) in n.children.iter().rev() {
                    let name = String::from_utf8_lossy(name);
                    let p = if path.is_empty() {
                        name.to_string()
                    } else {
                        format!("{path}/{name}")
                    };
                    stack.push((p, child.0));
                }
            }
        }
        out
    }

    pub fn lookup(&self, path: &str) -> Option<&Node> {
        self.paths()
            .into_iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, i)| self.nodes.get(&i))
    }

    /// The file's contents with holes as zeros.
    pub fn contents(&self, path: &str) -> Vec<u8> {
        let n = self.lookup(path).expect("path");
        let NodeKind::File { size } = n.kind else {
            panic!("{path} is not a file")
        };
        let mut v = vec![0u8; size as usize];
        for (off, d) in &n.data {
            v[*off as usize..*off as usize + d.len()].copy_from_slice(d);
        }
        v
    }

    /// A canonical text form of the tree. `times` adds mtimes; ctime, atime
    /// and crtime are left out (a tar cannot carry them faithfully).
    pub fn render(&self, times: bool) -> String {
        let mut out = String::new();
        let mut first_path: BTreeMap<u64, String> = BTreeMap::new();
        for (path, ino) in self.paths() {
            let n = &self.nodes[&ino];
            if let Some(p) = first_path.get(&ino) {
                out += &format!("{path:?} = hardlink {p:?}\n");
                continue;
            }
            first_path.insert(ino, path.clone());
            let kind = match &n.kind {
                NodeKind::File { size } => {
                    let segs: Vec<String> = n
                        .data
                        .iter()
                        .map(|(o, d)| format!("{o}+{}#{:08x}", d.len(), crc32c::crc32c(d)))
                        .collect();
                    format!("file {size} [{}]", segs.join(" "))
                }
                other => format!("{other:?}"),
            };
            let m = &n.meta;
            out += &format!("{path:?} {kind} mode={:o} {}:{}", m.mode, m.uid, m.gid);
            if times {
                out += &format!(" mtime={}.{:09}", m.mtime.sec, m.mtime.nsec);
            }
            for (k, v) in &n.xattrs {
                out += &format!(" {}={}", String::from_utf8_lossy(k), hex(v));
            }
            out += "\n";
        }
        out
    }
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

impl BuildTarget for Mock {
    fn root(&self) -> Ino {
        Ino(128)
    }

    fn create(&mut self, parent: Ino, name: &[u8], kind: &NodeKind, meta: &Meta) -> Result<Ino> {
        self.calls += 1;
        let ino = Ino(self.next);
        self.add_name(parent, name, ino)?;
        self.next += 1;
        self.nodes.insert(
            ino.0,
            Node {
                kind: kind.clone(),
                meta: meta.clone(),
                xattrs: BTreeMap::new(),
                data: Vec::new(),
                children: BTreeMap::new(),
                meta_final: false,
                nlink: 1,
            },
        );
        Ok(ino)
    }

    fn write_data(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<()> {
        self.calls += 1;
        let n = self.node(ino)?;
        let NodeKind::File { size } = n.kind else {
            return Err(bad("data for a non-file".into()));
        };
        if data.is_empty() || offset + data.len() as u64 > size {
            return Err(bad(format!(
                "write {offset}+{} past size {size}",
                data.len()
            )));
        }
        match n.data.last_mut() {
            Some((o, d)) if *o + d.len() as u64 == offset => d.extend_from_slice(data),
            Some((o, d)) if *o + d.len() as u64 > offset => {
                return Err(bad("data written out of order".into()))
            }
            _ => n.data.push((offset, data.to_vec())),
        }
        Ok(())
    }

    fn link(&mut self, parent: Ino, name: &[u8], target: Ino) -> Result<()> {
        self.calls += 1;
        if self.node(target)?.kind == NodeKind::Dir {
            return Err(bad("hard link to a directory".into()));
        }
        self.add_name(parent, name, target)?;
        self.node(target)?.nlink += 1;
        Ok(())
    }

    fn lookup(&mut self, dir: Ino, name: &[u8]) -> Result<Option<Ino>> {
        Ok(self.node(dir)?.children.get(name).copied())
    }

    fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> Result<()> {
        self.calls += 1;
        self.node(ino)?.xattrs.insert(name.to_vec(), value.to_vec());
        Ok(())
    }

    fn set_meta(&mut self, ino: Ino, meta: &Meta) -> Result<()> {
        self.calls += 1;
        let n = self.node(ino)?;
        n.meta = meta.clone();
        if n.kind == NodeKind::Dir {
            n.meta_final = true;
        }
        Ok(())
    }
}
