//! Changing directories in all five formats: short form in the inode,
//! single block, leaf, node, and btree (a node directory whose fork is a
//! bmbt). Adding converts up a format when the current one is full;
//! removing converts back down.
//!
//! None of these functions logs `dp`: they change it and the caller logs it.
//!
//! The logic works on a [`store::Store`] of directory blocks, so the
//! in-block code is tested on memory; the public functions run it over
//! the transaction's buffers (blocks mapped through crate::bmap).

mod block;
mod dblock;
mod fast;
mod fastblock;
mod freeidx;
mod layout;
mod leaf;
mod node;
mod sf;
mod store;
#[cfg(test)]
mod tests;

use crate::dir::check_name;
use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::inode::{ForkFormat, Inode};
use crate::trans::Trans;
use layout::{da_magic, leaf_db};
use sf::{Sf, FT_DIR};
use store::{must_get, Store, TransStore};

/// The format a directory is in now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Short,
    Block,
    Leaf,
    Node,
}

fn form(st: &mut dyn Store, dp: &Inode) -> Result<Form> {
    if dp.file_type != crate::inode::FileType::Dir {
        return Err(Error::NotDir(format!("inode {}", dp.ino.0)));
    }
    match dp.format {
        ForkFormat::Local => Ok(Form::Short),
        ForkFormat::Extents | ForkFormat::Btree => {
            let ldb = leaf_db(st.geo());
            match st.view(dp, ldb)? {
                None => Ok(Form::Block),
                Some(b) if da_magic(b) == crate::dir::lookup::DIR3_LEAF1_MAGIC => Ok(Form::Leaf),
                Some(_) => Ok(Form::Node),
            }
        }
        ForkFormat::Dev | ForkFormat::MetaBtree => Err(Error::NotDir(format!(
            "inode {} has a device fork",
            dp.ino.0
        ))),
    }
}

fn check_new_name(name: &[u8]) -> Result<()> {
    check_name(name).map_err(|d| Error::Invalid(d.into()))?;
    if name.len() > 255 || name == b"." || name == b".." {
        return Err(Error::Invalid(format!(
            "{:?} cannot be a directory entry",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// Where an entry of an extent-form directory is: (data block, entry).
fn find_ext(
    st: &mut dyn Store,
    dp: &Inode,
    f: Form,
    name: &[u8],
) -> Result<Option<(u64, dblock::Ent)>> {
    if name != b"." && name != b".." {
        match f {
            Form::Block => return fast::find_block(st, dp, name),
            Form::Leaf => return fast::find_leaf(st, dp, name),
            _ => {
                if let Some(r) = fast::find_node(st, dp, name)? {
                    return Ok(r);
                }
            }
        }
    }
    if f == Form::Block || name == b"." || name == b".." {
        let geo = st.geo().clone();
        let b = must_get(st, dp, 0)?;
        let end = leaf::data_end(&b);
        return Ok(dblock::find(&geo, dp.ino.0, 0, &b, end, name)?.map(|e| (0, e)));
    }
    match f {
        Form::Leaf => leaf::find(st, dp, name),
        _ => node::find(st, dp, name),
    }
}

pub(crate) fn lookup_in(st: &mut dyn Store, dp: &Inode, name: &[u8]) -> Result<Option<(Ino, u8)>> {
    let f = form(st, dp)?;
    if name == b"." {
        return Ok(Some((dp.ino, FT_DIR)));
    }
    if f == Form::Short {
        let sf = Sf::decode(st.geo(), dp)?;
        if name == b".." {
            return Ok(Some((Ino(sf.parent), FT_DIR)));
        }
        return Ok(sf
            .ents
            .iter()
            .find(|e| e.name == name)
            .map(|e| (Ino(e.ino), e.ftype)));
    }
    Ok(find_ext(st, dp, f, name)?.map(|(_, e)| (Ino(e.ino), e.ftype)))
}

pub(crate) fn add_in(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> Result<()> {
    check_new_name(name)?;
    let mut f = form(st, dp)?;
    let exists = if f == Form::Short {
        lookup_in(st, dp, name)?.is_some()
    } else {
        find_ext(st, dp, f, name)?.is_some()
    };
    if exists {
        return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    if f == Form::Short {
        let geo = st.geo().clone();
        let sf = Sf::decode(&geo, dp)?;
        if let Some((i, off)) = sf.pick(&geo, name.len()) {
            let mut new = sf.clone();
            new.insert(i, off, name, ino, ftype);
            if new.fits(&geo, dp) {
                return new.store(&geo, dp);
            }
        }
        sf.to_block(st, dp)?;
        f = Form::Block;
    }
    if f == Form::Block {
        if fast::add_block(st, dp, name, ino.0, ftype)? || block::add(st, dp, name, ino.0, ftype)? {
            return Ok(());
        }
        block::to_leaf(st, dp)?;
        f = Form::Leaf;
    }
    if f == Form::Leaf {
        if fast::add_leaf(st, dp, name, ino.0, ftype)? || leaf::add(st, dp, name, ino.0, ftype)? {
            return Ok(());
        }
        leaf::to_node(st, dp)?;
    } else if fast::add_node(st, dp, name, ino.0, ftype)? {
        return Ok(());
    }
    node::add(st, dp, name, ino.0, ftype)
}

pub(crate) fn remove_in(st: &mut dyn Store, dp: &mut Inode, name: &[u8]) -> Result<Ino> {
    check_new_name(name)?;
    let geo = st.geo().clone();
    let gone = match form(st, dp)? {
        Form::Short => {
            let mut sf = Sf::decode(&geo, dp)?;
            match sf.ents.iter().position(|e| e.name == name) {
                Some(i) => {
                    let e = sf.ents.remove(i);
                    sf.store(&geo, dp)?;
                    Some(e.ino)
                }
                None => None,
            }
        }
        Form::Block => block::remove(st, dp, name)?,
        Form::Leaf => leaf::remove(st, dp, name)?,
        Form::Node => node::remove(st, dp, name)?,
    };
    gone.map(Ino)
        .ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))
}

pub(crate) fn replace_in(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> Result<Ino> {
    if name != b".." {
        check_new_name(name)?;
    }
    let geo = st.geo().clone();
    let not_found = || Error::NotFound(String::from_utf8_lossy(name).into_owned());
    let f = form(st, dp)?;
    if f == Form::Short {
        let sf = Sf::decode(&geo, dp)?;
        let mut new = sf.clone();
        let old = if name == b".." {
            std::mem::replace(&mut new.parent, ino.0)
        } else {
            let e = new
                .ents
                .iter_mut()
                .find(|e| e.name == name)
                .ok_or_else(not_found)?;
            e.ftype = ftype;
            std::mem::replace(&mut e.ino, ino.0)
        };
        if new.fits(&geo, dp) {
            new.store(&geo, dp)?;
            return Ok(Ino(old));
        }
        // Wider inode numbers no longer fit the inode.
        sf.to_block(st, dp)?;
        return replace_in(st, dp, name, ino, ftype);
    }
    let (db, e) = find_ext(st, dp, f, name)?.ok_or_else(not_found)?;
    let mut b = must_get(st, dp, db)?;
    let ft = if name == b".." { FT_DIR } else { ftype };
    dblock::write_entry(&geo, &mut b, e.off, ino.0, name, ft);
    st.put(dp, db, &b)?;
    Ok(Ino(e.ino))
}

pub(crate) fn is_empty_in(st: &mut dyn Store, dp: &Inode) -> Result<bool> {
    let geo = st.geo().clone();
    if form(st, dp)? == Form::Short {
        return Ok(Sf::decode(&geo, dp)?.ents.is_empty());
    }
    for db in st.mapped_in(dp, 0, leaf_db(&geo))? {
        let b = must_get(st, dp, db)?;
        let end = leaf::data_end(&b);
        if dblock::entries(&geo, dp.ino.0, db, &b, end)?
            .iter()
            .any(|e| e.name != b"." && e.name != b"..")
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Makes `dp` an empty short-form directory whose '..' is `parent`.
pub fn init(tp: &mut Trans<'_>, dp: &mut Inode, parent: Ino) -> Result<()> {
    let sf = Sf {
        parent: parent.0,
        ents: Vec::new(),
    };
    dp.nextents = 0;
    sf.store(tp.geo(), dp)
}

/// The inode and file type code named `name` in `dp`, as this transaction sees it.
pub fn lookup(tp: &mut Trans<'_>, dp: &Inode, name: &[u8]) -> Result<Option<(Ino, u8)>> {
    lookup_in(&mut TransStore::new(tp), dp, name)
}

/// Adds entry `name` -> `ino` with file type code `ftype` (XFS_DIR3_FT_*).
/// `Error::Exists` if the name is there.
pub fn add(tp: &mut Trans<'_>, dp: &mut Inode, name: &[u8], ino: Ino, ftype: u8) -> Result<()> {
    add_in(&mut TransStore::new(tp), dp, name, ino, ftype)
}

/// Adds the entries `(name, ino, ftype)` in this order, as [`add`] does
/// each, with the directory's blocks looked up once for all of them.
pub fn add_all(tp: &mut Trans<'_>, dp: &mut Inode, ents: &[(&[u8], Ino, u8)]) -> Result<()> {
    let mut st = TransStore::new(tp);
    for &(name, ino, ftype) in ents {
        add_in(&mut st, dp, name, ino, ftype)?;
    }
    Ok(())
}

/// Removes entry `name`, returning the inode it named. `Error::NotFound` if absent.
pub fn remove(tp: &mut Trans<'_>, dp: &mut Inode, name: &[u8]) -> Result<Ino> {
    remove_in(&mut TransStore::new(tp), dp, name)
}

/// Points existing entry `name` (or "..") at `ino`, returning the old target.
pub fn replace(
    tp: &mut Trans<'_>,
    dp: &mut Inode,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> Result<Ino> {
    replace_in(&mut TransStore::new(tp), dp, name, ino, ftype)
}

/// True when `dp` holds nothing but '.' and '..'.
pub fn is_empty(tp: &mut Trans<'_>, dp: &Inode) -> Result<bool> {
    is_empty_in(&mut TransStore::new(tp), dp)
}

/// Moves a short-form directory out of the inode into a single directory
/// block (what the kernel does when an attr fork needs the room). A
/// directory already in block form or beyond is left alone.
pub fn make_room(tp: &mut Trans<'_>, dp: &mut Inode) -> Result<()> {
    if dp.format != ForkFormat::Local {
        return Ok(());
    }
    let sf = Sf::decode(tp.geo(), dp)?;
    let mut st = TransStore::new(tp);
    sf.to_block(&mut st, dp)
}
