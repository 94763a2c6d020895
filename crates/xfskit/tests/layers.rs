//! The engine's modules point one way: no module uses a module of a higher
//! layer. The layer order is the one written in `src/lib.rs` and
//! docs/ARCHITECTURE.md; `LAYERS` below is that list, lowest first.
//!
//! Rules of the check:
//! - Every `.rs` file under `src/` but `lib.rs` (its re-exports name every
//!   module) is read. Files named `tests.rs`, files under a `tests/`
//!   directory, and items behind `#[cfg(test)]` (a `mod tests { .. }`, a
//!   `#[cfg(test)] mod x;` file, a test-only `use` or `fn`) are left out:
//!   tests may build images with any layer.
//! - Comments and string literals are left out; every other `crate::a::b`
//!   path is an edge to module `a/b` (or `a`). The root's re-exports
//!   (`crate::Fs`, `crate::Error`...) count as their modules.
//! - A file belongs to the longest entry of `LAYERS` that is a prefix of
//!   its module path (`quota/acct.rs` is `quota`, `quota/enable.rs` is
//!   `quota/enable`). So does the target of an edge.
//! - An edge may go down or stay inside its own module. Between two
//!   modules of one layer it is allowed only in the layer marked `circle`
//!   (the libxfs-shaped core, whose modules use each other as libxfs's
//!   do); elsewhere modules of one layer are peers that do not use each
//!   other.
//! - `EXCEPTIONS` lists the edges that still point the wrong way, each
//!   with its reason. An exception no longer needed fails the test too, so
//!   the list stays exact.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: (name, allows a circle, modules).
const LAYERS: &[(&str, bool, &[&str])] = &[
    ("leaves", false, &["bytes", "error", "sys"]),
    ("devices", false, &["dev"]),
    ("disk images", false, &["disk"]),
    ("geometry", false, &["geometry"]),
    ("buffers", false, &["buf", "rtgroup"]),
    (
        "core",
        true,
        &[
            "alloc", "attr", "bmap", "btree", "dir", "fs", "ialloc", "inode", "log", "quota",
            "symlink", "trans",
        ],
    ),
    ("reads", false, &["scan", "namei", "walk", "spill", "info"]),
    ("read tools", false, &["paths", "db", "extract"]),
    ("check", false, &["check"]),
    ("mkfs", false, &["mkfs"]),
    ("write API", false, &["namespace"]),
    ("builders", false, &["build"]),
    (
        "tools",
        false,
        &[
            "admin",
            "grow",
            "quota/enable",
            "bodyfile",
            "forensic",
            "metadump",
        ],
    ),
    ("repair", false, &["repair"]),
];

/// Edges that still point the wrong way: (file, target module, reason).
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// The crate root's re-exports and the modules they come from.
const ROOT_REEXPORTS: &[(&str, &str)] = &[
    ("Error", "error"),
    ("Location", "error"),
    ("Result", "error"),
    ("Fs", "fs"),
    ("OpenOptions", "fs"),
    ("Geometry", "geometry"),
    ("Ino", "geometry"),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `a/b/mod.rs` and `a/b.rs` are module path `a/b`.
fn module_path(rel: &Path) -> String {
    let s = rel.to_str().unwrap().trim_end_matches(".rs");
    s.strip_suffix("/mod").unwrap_or(s).to_string()
}

/// The source with comments, string and char literals blanked (spaces),
/// lines kept.
fn code_only(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == b'r'
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && b[i + 1..].iter().take_while(|&&c| c == b'#').count() + i + 1 < b.len()
            && b[i + 1 + b[i + 1..].iter().take_while(|&&c| c == b'#').count()] == b'"'
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| start + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|n| i + 2 + n + 1)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                std::str::from_utf8(&b[i + 1..])
                    .ok()
                    .and_then(|s| s.chars().next())
                    .filter(|c| !c.is_ascii())
                    .map(|c| i + 1 + c.len_utf8() + 1)
            };
            match end {
                Some(e) => {
                    blank(&mut out, i, e);
                    i = e;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Blanks every item behind `#[cfg(test)]`; returns the names of
/// `#[cfg(test)] mod name;` files.
fn drop_test_items(code: &mut [u8]) -> Vec<String> {
    let mut mods = Vec::new();
    let pat = b"#[cfg(test)]";
    let mut i = 0;
    while let Some(n) = code[i..].windows(pat.len()).position(|w| w == pat) {
        let start = i + n;
        let mut j = start + pat.len();
        // The item ends at its first `;` outside braces or at the brace
        // closing its first `{`.
        let mut depth = 0usize;
        while j < code.len() {
            match code[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let item = String::from_utf8_lossy(&code[start + pat.len()..j]).to_string();
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ';'))
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(k) = words.iter().position(|w| *w == "mod") {
            if let Some(name) = words.get(k + 1) {
                if let Some(name) = name.strip_suffix(';') {
                    mods.push(name.to_string());
                } else if words.get(k + 2) == Some(&";") {
                    mods.push(name.to_string());
                }
            }
        }
        for c in &mut code[start..j] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = j;
    }
    mods
}

/// Every `crate::a::b::...` in the code, as the module path candidates
/// (`a/b`, `a`), with its line.
fn crate_paths(code: &[u8]) -> Vec<(usize, Vec<String>)> {
    let s = String::from_utf8_lossy(code);
    let mut out = Vec::new();
    for (ln, line) in s.lines().enumerate() {
        let mut rest = line;
        while let Some(n) = rest.find("crate::") {
            let before = rest[..n].chars().last();
            let after = &rest[n + "crate::".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `xcrate::` is not the crate root
            }
            let segs: Vec<&str> = after
                .split("::")
                .map(|seg| {
                    let end = seg
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(seg.len());
                    &seg[..end]
                })
                .take_while(|seg| !seg.is_empty())
                .collect();
            if segs.is_empty() {
                continue; // crate::{...}: the group is checked below
            }
            let mut cands = Vec::new();
            for k in (1..=segs.len()).rev() {
                cands.push(segs[..k].join("/"));
            }
            out.push((ln + 1, cands));
        }
    }
    out
}

struct Layering {
    /// Module path prefix -> (layer index, circle allowed).
    of: BTreeMap<&'static str, (usize, bool)>,
}

impl Layering {
    fn new() -> Self {
        let mut of = BTreeMap::new();
        for (i, (_, circle, mods)) in LAYERS.iter().enumerate() {
            for m in *mods {
                assert!(of.insert(*m, (i, *circle)).is_none(), "{m} listed twice");
            }
        }
        Layering { of }
    }

    /// The listed module a module path belongs to (longest prefix).
    fn owner(&self, path: &str) -> Option<&'static str> {
        let mut p = path;
        loop {
            if let Some((k, _)) = self.of.get_key_value(p) {
                return Some(k);
            }
            p = &p[..p.rfind('/')?];
        }
    }
}

/// The edges that point the wrong way: (file, target module) -> lines.
fn violations() -> BTreeMap<(String, String), Vec<usize>> {
    let lay = Layering::new();
    let src = src_dir();
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    // `#[cfg(test)] mod x;` files, found first.
    let mut test_files = BTreeSet::new();
    let mut codes = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_path_buf();
        let mut code = code_only(&std::fs::read_to_string(f).unwrap());
        let mods = drop_test_items(&mut code);
        let mp = module_path(&rel);
        for m in mods {
            let base = if rel.file_name().unwrap() == "lib.rs" {
                String::new()
            } else {
                format!("{mp}/")
            };
            test_files.insert(format!("{base}{m}"));
        }
        codes.push((rel, mp, code));
    }
    let mut bad: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (rel, mp, code) in &codes {
        let name = rel.file_name().unwrap().to_str().unwrap();
        if name == "lib.rs"
            || name == "tests.rs"
            || rel.components().any(|c| c.as_os_str() == "tests")
            || test_files
                .iter()
                .any(|t| mp == t || mp.starts_with(&format!("{t}/")))
        {
            continue;
        }
        let from = lay
            .owner(mp)
            .unwrap_or_else(|| panic!("{}: module {mp} is in no layer of LAYERS", rel.display()));
        let (fl, fcircle) = lay.of[from];
        for (line, cands) in crate_paths(code) {
            let top = &cands[cands.len() - 1];
            let target = ROOT_REEXPORTS
                .iter()
                .find(|(n, _)| n == top)
                .map(|(_, m)| *m)
                .or_else(|| cands.iter().find_map(|c| lay.owner(c)));
            let Some(to) = target else {
                panic!(
                    "{}:{line}: crate::{} is in no layer of LAYERS",
                    rel.display(),
                    top
                );
            };
            if to == from || mp.starts_with(&format!("{to}/")) {
                continue; // inside its own module
            }
            let (tl, _) = lay.of[to];
            if tl < fl || (tl == fl && fcircle) {
                continue;
            }
            bad.entry((rel.to_str().unwrap().to_string(), to.to_string()))
                .or_default()
                .push(line);
        }
    }
    bad
}

#[test]
fn layers_point_one_way() {
    let bad = violations();
    let mut msgs = Vec::new();
    let layer_of = |m: &str| {
        LAYERS
            .iter()
            .find(|(_, _, ms)| ms.contains(&m))
            .map_or("?", |(n, _, _)| *n)
    };
    for ((file, to), lines) in &bad {
        if EXCEPTIONS.iter().any(|(f, t, _)| f == file && t == to) {
            continue;
        }
        let from = Layering::new()
            .owner(&module_path(Path::new(file)))
            .unwrap();
        msgs.push(format!(
            "src/{file}:{lines:?} uses crate::{} ({} layer) from {from} ({} layer)",
            to.replace('/', "::"),
            layer_of(to),
            layer_of(from),
        ));
    }
    for (f, t, why) in EXCEPTIONS {
        if !bad.contains_key(&(f.to_string(), t.to_string())) {
            msgs.push(format!(
                "exception src/{f} -> {t} ({why}) is no longer needed: remove it"
            ));
        }
    }
    assert!(
        msgs.is_empty(),
        "edges against the layer order:\n{}",
        msgs.join("\n")
    );
}

/// The rules themselves: a use from a lower layer is found, a test module
/// is not.
#[test]
fn the_scanner_sees_edges() {
    let src = "use crate::fs::Fs; // crate::check\n\
               fn f() { let s = \"crate::repair\"; crate::quota::acct::Use::default(); }\n\
               #[cfg(test)]\nmod tests { use crate::mkfs::mkfs; }\n\
               #[cfg(test)]\nmod more;\n";
    let mut code = code_only(src);
    let mods = drop_test_items(&mut code);
    assert_eq!(mods, ["more"]);
    let paths: Vec<_> = crate_paths(&code)
        .into_iter()
        .map(|(l, c)| (l, c[0].clone()))
        .collect();
    assert_eq!(
        paths,
        [
            (1, "fs/Fs".to_string()),
            (2, "quota/acct/Use/default".to_string())
        ]
    );
    let lay = Layering::new();
    assert_eq!(lay.owner("quota/acct/Use/default"), Some("quota"));
    assert_eq!(lay.owner("quota/enable/enable"), Some("quota/enable"));
}
