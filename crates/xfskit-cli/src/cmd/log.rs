//! `xfskit log`: what the log holds, like `xfs_logprint -t` in summary.

use crate::cmd::out::outln;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use xfs_format::log_intent::*;
use xfskit::log::intents::Intent;
use xfskit::log::item_type_name;
use xfskit::log::LogContents;

/// The long help of `xfskit log`.
pub const LONG_ABOUT: &str = "Print what the log of an XFS image holds (an external log: --logdev).

The log is read the way the kernel reads it at mount: the head is found
where the cycle number stamped on every 512-byte log block drops, records
torn by a crash (bad CRC just behind the head) are dropped, and the tail is
the tail LSN of the last record. Every record from tail to head is then
read and checked, and its operations are put back together into
transactions. Only committed transactions would be replayed.

The report gives the head and the tail (log block and cycle), whether the
log is clean (it ends with an unmount record), the records, the committed
transactions and their items counted by type (BUF, INODE, ICREATE, EFI,
EFD, RUI, RUD, CUI, CUD, BUI, BUD, ATTRI, ATTRD, XMI, XMD...), and the
intents whose done item is missing (for a mapping exchange, XMI, also the
two inodes, where the exchange stopped in each, the blocks left and its
flags; for an attribute update, ATTRI, the inode, the operation, the
namespace filter and the name and value lengths; for the others, each
extent to free, reverse-mapping or reference-count update and block
mapping, with its blocks and flags). With --transactions each transaction
is listed with its LSN and items; with --items also what each item changes,
as xfs_logprint -t shows it: a buffer's disk address, length, kind (AGF,
AGI, btree, inode cluster, dir data...) and logged 128-byte chunks, an
inode's number, logged parts (core, data-extents, attr-local...) and
cluster, a new inode chunk's AG and blocks, an intent's id and extent count
and a done item's intent.

The image is only read. A log that cannot be read (a bad CRC in the middle
of the live log, garbage where a record header should be, a tail that is
not behind the head) is reported as an error naming the log block.

An external log (mkfs.xfs -l logdev=) is read from the device given with
--logdev, as xfs_logprint -l takes it; a log device whose records name
another filesystem is refused.

Exit codes: 0 the log was read; 2 a wrong log device; 3 an external log
without --logdev; 4 I/O error; 5 the log is corrupt.

Examples:
  xfskit log disk.img
  xfskit log --json disk.img | jq .items
  xfskit log --transactions disk.img
  xfskit log --items disk.img | grep 'INODE ino 131'
  xfskit log --logdev log.img disk.img";

/// Arguments of `xfskit log`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// List every committed transaction.
    #[arg(long)]
    pub transactions: bool,
    /// List every committed transaction and what each of its items changes
    /// (as xfs_logprint -t does): a buffer's disk address, length, kind and
    /// logged chunks; an inode's number and logged parts; an inode chunk's
    /// AG and blocks; an intent's or done item's id.
    #[arg(long)]
    pub items: bool,
}

fn item_counts(c: &LogContents) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for t in &c.transactions {
        for it in &t.items {
            *m.entry(item_type_name(it.item_type())).or_insert(0) += 1;
        }
    }
    m
}

/// The log item name of an intent.
fn kind(i: &Intent) -> &'static str {
    match i {
        Intent::Efi(e) if e.realtime => "EFI_RT",
        Intent::Efi(_) => "EFI",
        Intent::Rui(_) => "RUI",
        Intent::Cui(_) => "CUI",
        Intent::Bui(_) => "BUI",
        Intent::Xmi(_) => "XMI",
        Intent::Attri(_) => "ATTRI",
    }
}

fn id(i: &Intent) -> u64 {
    match i {
        Intent::Efi(e) => e.id,
        Intent::Rui(r) => r.id,
        Intent::Cui(c) => c.id,
        Intent::Bui(b) => b.id,
        Intent::Xmi(x) => x.id,
        Intent::Attri(a) => a.id,
    }
}

fn rmap_op(flags: u32) -> &'static str {
    match flags & XFS_RMAP_EXTENT_TYPE_MASK {
        XFS_RMAP_EXTENT_MAP => "map",
        XFS_RMAP_EXTENT_MAP_SHARED => "map_shared",
        XFS_RMAP_EXTENT_UNMAP => "unmap",
        XFS_RMAP_EXTENT_UNMAP_SHARED => "unmap_shared",
        XFS_RMAP_EXTENT_CONVERT => "convert",
        XFS_RMAP_EXTENT_CONVERT_SHARED => "convert_shared",
        XFS_RMAP_EXTENT_ALLOC => "alloc",
        XFS_RMAP_EXTENT_FREE => "free",
        _ => "unknown",
    }
}

fn refcount_op(flags: u32) -> &'static str {
    match flags & XFS_REFCOUNT_EXTENT_TYPE_MASK {
        XFS_REFCOUNT_INCREASE => "increase",
        XFS_REFCOUNT_DECREASE => "decrease",
        XFS_REFCOUNT_ALLOC_COW => "alloc_cow",
        XFS_REFCOUNT_FREE_COW => "free_cow",
        _ => "unknown",
    }
}

fn bmap_op(flags: u32) -> &'static str {
    match flags & XFS_BMAP_EXTENT_TYPE_MASK {
        XFS_BMAP_MAP => "map",
        XFS_BMAP_UNMAP => "unmap",
        _ => "unknown",
    }
}

/// Names of the flag bits set in `flags` among `names`.
fn flag_names(flags: u32, names: &[(u32, &'static str)]) -> Vec<&'static str> {
    names
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// Reverse-mapping or block-mapping updates, each (inode, start block,
/// file offset, length, flags), as JSON objects (the inode under
/// `who`) and as lines of `line(op, inode, start, offset, length)` with the
/// flags named after them.
fn file_maps(
    maps: &[(u64, u64, u64, u32, u32)],
    who: &str,
    op: fn(u32) -> &'static str,
    flags: &[(u32, &'static str)],
    line: impl Fn(&str, u64, u64, u64, u32) -> String,
) -> (serde_json::Value, Vec<String>) {
    let json = maps
        .iter()
        .map(|&(ino, start, off, len, fl)| {
            serde_json::json!({"op": op(fl), who: ino, "start": start,
                "offset": off, "blocks": len, "flags": flag_names(fl, flags)})
        })
        .collect();
    let text = maps
        .iter()
        .map(|&(ino, start, off, len, fl)| {
            let names = flag_names(fl, flags);
            let f = if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            };
            format!("{}{f}", line(op(fl), ino, start, off, len))
        })
        .collect();
    (json, text)
}

/// What an unfinished intent asks for: the JSON key and value that
/// describe it, and the same as lines of text. Block numbers are
/// filesystem blocks (AG number in the high bits), offsets and lengths
/// are in blocks.
fn details(i: &Intent) -> (&'static str, serde_json::Value, Vec<String>) {
    use serde_json::json;
    match i {
        Intent::Efi(e) => (
            "extents",
            e.extents
                .iter()
                .map(|&(start, len)| json!({"start": start, "blocks": len}))
                .collect(),
            e.extents
                .iter()
                .map(|&(start, len)| format!("free {len} blocks at block {start}"))
                .collect(),
        ),
        Intent::Rui(r) => {
            const F: &[(u32, &str)] = &[
                (XFS_RMAP_EXTENT_ATTR_FORK, "attr_fork"),
                (XFS_RMAP_EXTENT_BMBT_BLOCK, "bmbt_block"),
                (XFS_RMAP_EXTENT_UNWRITTEN, "unwritten"),
            ];
            let (v, text) = file_maps(&r.maps, "owner", rmap_op, F, |op, owner, start, off, len| {
                format!("rmap {op}: owner {owner}, {len} blocks at block {start}, offset {off}")
            });
            ("updates", v, text)
        }
        Intent::Cui(c) => (
            "changes",
            c.changes
                .iter()
                .map(|&(start, len, fl)| {
                    json!({"op": refcount_op(fl), "start": start, "blocks": len})
                })
                .collect(),
            c.changes
                .iter()
                .map(|&(start, len, fl)| {
                    format!("refcount {}: {len} blocks at block {start}", refcount_op(fl))
                })
                .collect(),
        ),
        Intent::Bui(b) => {
            const F: &[(u32, &str)] = &[
                (XFS_BMAP_EXTENT_ATTR_FORK, "attr_fork"),
                (XFS_BMAP_EXTENT_UNWRITTEN, "unwritten"),
                (XFS_BMAP_EXTENT_REALTIME, "realtime"),
            ];
            let (v, text) = file_maps(&b.maps, "inode", bmap_op, F, |op, ino, start, off, len| {
                format!("{op} inode {ino} offset {off}: {len} blocks at block {start}")
            });
            ("mappings", v, text)
        }
        Intent::Xmi(x) => (
            "exchange",
            json!({
                "inode1": x.inode1, "inode2": x.inode2,
                "igen1": x.igen1, "igen2": x.igen2,
                "startoff1": x.startoff1, "startoff2": x.startoff2,
                "blockcount": x.blockcount, "flags": x.flags,
                "isize1": x.isize1, "isize2": x.isize2,
            }),
            vec![format!(
                "exchange inode {} blocks {}.. with inode {} blocks {}..: {} blocks left, flags {:#x}",
                x.inode1, x.startoff1, x.inode2, x.startoff2, x.blockcount, x.flags
            )],
        ),
        Intent::Attri(a) => (
            "attr",
            json!({
                "inode": a.ino, "op": xfskit::log::attr::op_name(a.op),
                "filter": a.filter, "name": String::from_utf8_lossy(&a.name),
                "name_len": a.name.len(), "value_len": a.value.len(),
            }),
            vec![format!(
                "attribute {} of inode {}: filter {:#x}, name {:?} ({} bytes), value of {} bytes",
                xfskit::log::attr::op_name(a.op),
                a.ino,
                a.filter,
                String::from_utf8_lossy(&a.name),
                a.name.len(),
                a.value.len()
            )],
        ),
    }
}

fn lsn(l: u64) -> String {
    format!("{}/{}", l >> 32, l as u32)
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open_in(&args.image, &args.disk, true)?;
    let c = xfskit::log::read_log(fs.device(), fs.geometry())?;
    let unfinished = xfskit::log::replay::unfinished_intents(&c.transactions);
    // What each unfinished intent still asks for (a malformed intent is
    // reported by recovery; here it just has no details).
    let intents: BTreeMap<(&'static str, u64), Intent> =
        xfskit::log::intents::unfinished(&c.transactions)
            .unwrap_or_default()
            .into_iter()
            .map(|i| ((kind(&i), id(&i)), i))
            .collect();
    let counts = item_counts(&c);
    let e = &c.ends;
    let state = if e.empty {
        "empty"
    } else if e.clean {
        "clean"
    } else {
        "dirty"
    };
    if args.json {
        let txs: Vec<_> = c
            .transactions
            .iter()
            .map(|t| {
                let mut v = serde_json::json!({
                    "tid": t.tid, "lsn": lsn(t.lsn), "start_block": t.start_blk,
                    "commit_block": t.commit_blk, "type": t.trans_type,
                    "items": t.items.iter().map(|i| item_type_name(i.item_type())).collect::<Vec<_>>(),
                });
                if args.items {
                    v["item_details"] = (0..t.items.len())
                        .map(|i| xfskit::log::describe::item(t, i).json)
                        .collect();
                }
                v
            })
            .collect();
        let v = serde_json::json!({
            "state": state,
            "log_blocks": fs.geometry().log_blocks,
            "log_start_daddr": fs.geometry().fsb_to_daddr(fs.geometry().log_start).0,
            "head": { "block": e.head_blk, "cycle": e.head_cycle },
            "tail": { "block": e.tail_blk, "lsn": lsn(e.tail_lsn) },
            "torn_records": e.torn,
            "records": c.records.len(),
            "transactions": c.transactions.len(),
            "uncommitted": c.uncommitted,
            "items": counts,
            "unfinished_intents": unfinished.iter()
                .map(|(t, id, l)| {
                    let mut v = serde_json::json!({"type": t, "id": id, "lsn": lsn(*l)});
                    if let Some(i) = intents.get(&(*t, *id)) {
                        let (key, value, _) = details(i);
                        v[key] = value;
                    }
                    v
                })
                .collect::<Vec<_>>(),
            "transaction_list": if args.transactions || args.items { serde_json::Value::Array(txs) } else { serde_json::Value::Null },
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "log: {} blocks of 512 bytes, {state}",
        fs.geometry().log_blocks as u64 * fs.geometry().block_size as u64 / 512
    );
    outln!("head: block {} cycle {}", e.head_blk, e.head_cycle);
    outln!("tail: block {} (lsn {})", e.tail_blk, lsn(e.tail_lsn));
    if !e.torn.is_empty() {
        outln!("torn records dropped at the head: blocks {:?}", e.torn);
    }
    outln!(
        "records: {}  committed transactions: {}  uncommitted: {}",
        c.records.len(),
        c.transactions.len(),
        c.uncommitted
    );
    let items: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    outln!(
        "items: {}",
        if items.is_empty() {
            "none".into()
        } else {
            items.join(", ")
        }
    );
    for (t, id, l) in &unfinished {
        outln!("unfinished intent: {t} id {id:#x} lsn {}", lsn(*l));
        if let Some(i) = intents.get(&(*t, *id)) {
            for line in details(i).2 {
                outln!("  {line}");
            }
        }
    }
    if args.transactions || args.items {
        for t in &c.transactions {
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for it in &t.items {
                *per.entry(item_type_name(it.item_type())).or_insert(0) += 1;
            }
            let s: Vec<String> = per.iter().map(|(k, v)| format!("{k} {v}")).collect();
            outln!(
                "trans {:#010x} lsn {} blocks {}..{} type {}: {}",
                t.tid,
                lsn(t.lsn),
                t.start_blk,
                t.commit_blk,
                t.trans_type,
                s.join(", ")
            );
            if args.items {
                for i in 0..t.items.len() {
                    outln!("  {i}: {}", xfskit::log::describe::item(t, i).text);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfskit::log::intents::{Bui, Cui, Efi, Rui};

    #[test]
    fn every_intent_kind_says_what_it_asks_for() {
        let efi = Intent::Efi(Efi {
            id: 1,
            lsn: 0,
            rec_blk: 0,
            extents: vec![(100, 8)],
            realtime: false,
        });
        let (key, v, text) = details(&efi);
        assert_eq!(key, "extents");
        assert_eq!(v[0]["blocks"], 8);
        assert_eq!(text, ["free 8 blocks at block 100"]);

        let rui = Intent::Rui(Rui {
            id: 2,
            rec_blk: 0,
            maps: vec![(
                131,
                200,
                5,
                3,
                XFS_RMAP_EXTENT_CONVERT | XFS_RMAP_EXTENT_UNWRITTEN,
            )],
            realtime: false,
        });
        let (key, v, text) = details(&rui);
        assert_eq!(key, "updates");
        assert_eq!(v[0]["op"], "convert");
        assert_eq!(v[0]["flags"][0], "unwritten");
        assert_eq!(
            text,
            ["rmap convert: owner 131, 3 blocks at block 200, offset 5 (unwritten)"]
        );

        let cui = Intent::Cui(Cui {
            id: 3,
            rec_blk: 0,
            changes: vec![(300, 2, XFS_REFCOUNT_DECREASE)],
        });
        let (key, v, text) = details(&cui);
        assert_eq!(key, "changes");
        assert_eq!(v[0]["op"], "decrease");
        assert_eq!(text, ["refcount decrease: 2 blocks at block 300"]);

        let bui = Intent::Bui(Bui {
            id: 4,
            rec_blk: 0,
            maps: vec![(132, 400, 7, 1, XFS_BMAP_UNMAP | XFS_BMAP_EXTENT_ATTR_FORK)],
        });
        let (key, v, text) = details(&bui);
        assert_eq!(key, "mappings");
        assert_eq!(
            (v[0]["op"].as_str(), v[0]["inode"].as_u64()),
            (Some("unmap"), Some(132))
        );
        assert_eq!(
            text,
            ["unmap inode 132 offset 7: 1 blocks at block 400 (attr_fork)"]
        );
        assert_eq!(bmap_op(9), "unknown");
        assert_eq!(
            (kind(&bui), id(&bui), kind(&efi), id(&efi)),
            ("BUI", 4, "EFI", 1)
        );
    }
}
