//! What each logged item changes, in words and as JSON, for `xfskit log
//! --items` (what `xfs_logprint -t` shows of each item): the disk address,
//! length, kind and dirty ranges of a buffer, the inode number and the
//! parts of an inode, the AG and blocks of a new inode chunk, the id of
//! an intent or a done item. The format regions are decoded by the
//! parsers replay uses.

use super::buftype::{classify, BLFT_SHIFT};
use super::replay::{intent_id, BufFmt, ItemAt};
use super::replay_inode::parse_inode_fmt;
use super::trans::{Item, Trans};
use crate::bytes::get_le32;
use serde_json::{json, Value};
use xfs_format::log_item::{self as li, item_type_name};
use zerocopy::FromBytes;

/// One item described.
#[derive(Debug, Clone)]
pub struct Described {
    /// The item type's name (BUF, INODE, EFI, ...).
    pub kind: &'static str,
    /// One line of text.
    pub text: String,
    /// The same as JSON fields.
    pub json: Value,
}

/// The name of a buffer type (`XFS_BLFT_*`).
fn blft_name(t: u16) -> &'static str {
    match t {
        1 => "user dquot",
        2 => "project dquot",
        3 => "group dquot",
        4 => "btree",
        5 => "AGF",
        6 => "AGFL",
        7 => "AGI",
        8 => "inode cluster",
        9 => "symlink",
        10 => "dir block",
        11 => "dir data",
        12 => "dir free",
        13 => "dir leaf1",
        14 => "dir leafn",
        15 => "da node",
        16 => "attr leaf",
        17 => "attr remote",
        18 => "superblock",
        19 => "rt bitmap",
        20 => "rt summary",
        _ => "unknown",
    }
}

/// The names of the parts of an inode an inode item logs.
fn ilog_names(fields: u32) -> Vec<&'static str> {
    [
        (li::XFS_ILOG_CORE, "core"),
        (li::XFS_ILOG_DDATA, "data-local"),
        (li::XFS_ILOG_DEXT, "data-extents"),
        (li::XFS_ILOG_DBROOT, "data-btree"),
        (li::XFS_ILOG_DEV, "dev"),
        (li::XFS_ILOG_UUID, "uuid"),
        (li::XFS_ILOG_ADATA, "attr-local"),
        (li::XFS_ILOG_AEXT, "attr-extents"),
        (li::XFS_ILOG_ABROOT, "attr-btree"),
        (li::XFS_ILOG_DOWNER, "data-owner"),
        (li::XFS_ILOG_AOWNER, "attr-owner"),
        (li::XFS_ILOG_TIMESTAMP, "timestamp"),
        (li::XFS_ILOG_IVERSION, "iversion"),
    ]
    .iter()
    .filter(|(b, _)| fields & b != 0)
    .map(|(_, n)| *n)
    .collect()
}

/// Describes item `index` of `t`; a malformed item is described as such
/// (the error replay would give), never a panic.
pub fn item(t: &Trans, index: usize) -> Described {
    let it: &Item = &t.items[index];
    let at = ItemAt {
        rec_blk: t.commit_blk,
        index,
    };
    let ty = it.item_type();
    let kind = item_type_name(ty);
    let bad = |e: crate::error::Error| Described {
        kind,
        text: format!("{kind} malformed: {e}"),
        json: json!({ "type": kind, "error": e.to_string() }),
    };
    match ty {
        li::XFS_LI_BUF => {
            let f = match BufFmt::parse(it, at) {
                Ok(f) => f,
                Err(e) => return bad(e),
            };
            let blft = (f.flags & li::XFS_BLFT_MASK) >> BLFT_SHIFT;
            // The type the buffer claims, else what its magic says.
            let what = if blft != 0 {
                blft_name(blft)
            } else {
                it.regions
                    .get(1)
                    .and_then(|d| classify(d))
                    .map_or("unknown", |k| blft_name(k.blft))
            };
            let mut notes = Vec::new();
            if f.flags & li::XFS_BLF_CANCEL != 0 {
                notes.push("cancel");
            }
            if f.flags & li::XFS_BLF_INODE_BUF != 0 {
                notes.push("inode-buf");
            }
            let runs: Vec<(usize, usize)> = f.runs();
            let chunks: usize = runs.iter().map(|r| r.1).sum();
            let mut text = format!(
                "BUF daddr {} len {} ({what}) flags {:#x}, {chunks} of {} chunks logged",
                f.blkno,
                f.len_bb,
                f.flags,
                f.len_bb as usize * 512 / li::XFS_BLF_CHUNK
            );
            if !notes.is_empty() {
                text.push_str(&format!(" [{}]", notes.join(", ")));
            }
            Described {
                kind,
                text,
                json: json!({
                    "type": kind, "daddr": f.blkno, "len_bb": f.len_bb, "buffer": what,
                    "flags": f.flags, "cancel": f.flags & li::XFS_BLF_CANCEL != 0,
                    "logged_chunks": runs.iter().map(|r| [r.0, r.1]).collect::<Vec<_>>(),
                    "regions": it.total,
                }),
            }
        }
        li::XFS_LI_INODE => {
            let f = match parse_inode_fmt(&it.regions[0], at) {
                Ok(f) => f,
                Err(e) => return bad(e),
            };
            let parts = ilog_names(f.fields);
            Described {
                kind,
                text: format!(
                    "INODE ino {} ({}) in cluster daddr {} len {} at offset {}, {} regions",
                    f.ino,
                    parts.join(","),
                    f.blkno,
                    f.len,
                    f.boffset,
                    f.size
                ),
                json: json!({
                    "type": kind, "ino": f.ino, "fields": f.fields, "parts": parts,
                    "cluster_daddr": f.blkno, "cluster_len_bb": f.len,
                    "offset": f.boffset, "regions": f.size,
                }),
            }
        }
        li::XFS_LI_ICREATE => match li::IcreateLog::read_from_prefix(&it.regions[0]) {
            Ok((c, _)) => Described {
                kind,
                text: format!(
                    "ICREATE AG {} block {} length {}: {} inodes of {} bytes, generation {:#x}",
                    c.icl_ag.get(),
                    c.icl_agbno.get(),
                    c.icl_length.get(),
                    c.icl_count.get(),
                    c.icl_isize.get(),
                    c.icl_gen.get()
                ),
                json: json!({
                    "type": kind, "agno": c.icl_ag.get(), "agbno": c.icl_agbno.get(),
                    "length": c.icl_length.get(), "count": c.icl_count.get(),
                    "isize": c.icl_isize.get(), "gen": c.icl_gen.get(),
                }),
            },
            Err(_) => bad(at.err(
                "icreate log item",
                format!("format region of {} bytes", it.regions[0].len()),
            )),
        },
        li::XFS_LI_EFI
        | li::XFS_LI_EFI_RT
        | li::XFS_LI_RUI
        | li::XFS_LI_RUI_RT
        | li::XFS_LI_CUI
        | li::XFS_LI_BUI => {
            let id = match intent_id(it, at) {
                Ok(id) => id,
                Err(e) => return bad(e),
            };
            let n = get_le32(&it.regions[0], 4).unwrap_or(0);
            Described {
                kind,
                text: format!("{kind} id {id:#x}: {n} extents"),
                json: json!({ "type": kind, "id": id, "extents": n }),
            }
        }
        li::XFS_LI_EFD
        | li::XFS_LI_EFD_RT
        | li::XFS_LI_RUD
        | li::XFS_LI_RUD_RT
        | li::XFS_LI_CUD
        | li::XFS_LI_BUD
        | li::XFS_LI_ATTRD
        | li::XFS_LI_XMD
        | li::XFS_LI_ATTRI
        | li::XFS_LI_XMI => {
            let id = match intent_id(it, at) {
                Ok(id) => id,
                Err(e) => return bad(e),
            };
            let done = !matches!(ty, li::XFS_LI_ATTRI | li::XFS_LI_XMI);
            Described {
                kind,
                text: if done {
                    format!("{kind} done with intent {id:#x}")
                } else {
                    format!("{kind} id {id:#x}")
                },
                json: json!({ "type": kind, "id": id }),
            }
        }
        _ => Described {
            kind,
            text: format!(
                "{kind} (type {ty:#x}), {} of {} regions",
                it.regions.len(),
                it.total
            ),
            json: json!({ "type": kind, "item_type": ty, "regions": it.regions.len() }),
        },
    }
}
