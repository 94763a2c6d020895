//! `xfskit log`: what the log holds, like `xfs_logprint -t` in summary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::log::item_type_name;
use xfskit::log::LogContents;

/// The long help of `xfskit log`.
pub const LONG_ABOUT: &str = "Print what the internal log of an XFS image holds.

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
namespace filter and the name and value lengths). With --transactions each transaction
is listed with its LSN and items.

The image is only read. A log that cannot be read (a bad CRC in the middle
of the live log, garbage where a record header should be, a tail that is
not behind the head) is reported as an error naming the log block.

Exit codes: 0 the log was read; 3 external log; 4 I/O error; 5 the log is
corrupt.

Examples:
  xfskit log disk.img
  xfskit log --json disk.img | jq .items
  xfskit log --transactions disk.img";

/// Arguments of `xfskit log`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// List every committed transaction.
    #[arg(long)]
    pub transactions: bool,
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

fn lsn(l: u64) -> String {
    format!("{}/{}", l >> 32, l as u32)
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open(&args.image, true)?;
    let c = xfskit::log::read_log(fs.device(), fs.geometry())?;
    let unfinished = xfskit::log::replay::unfinished_intents(&c.transactions);
    // What each unfinished mapping exchange still has to do (a malformed
    // intent is reported by recovery; here it just has no details).
    let xmis: BTreeMap<u64, xfskit::log::exchange::Xmi> =
        xfskit::log::intents::unfinished(&c.transactions)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| match i {
                xfskit::log::intents::Intent::Xmi(x) => Some((x.id, x)),
                _ => None,
            })
            .collect();
    let attris: BTreeMap<u64, xfskit::log::attr::Attri> =
        xfskit::log::intents::unfinished(&c.transactions)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| match i {
                xfskit::log::intents::Intent::Attri(a) => Some((a.id, a)),
                _ => None,
            })
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
                serde_json::json!({
                    "tid": t.tid, "lsn": lsn(t.lsn), "start_block": t.start_blk,
                    "commit_block": t.commit_blk, "type": t.trans_type,
                    "items": t.items.iter().map(|i| item_type_name(i.item_type())).collect::<Vec<_>>(),
                })
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
                    if let (&"XMI", Some(x)) = (t, xmis.get(id)) {
                        v["exchange"] = serde_json::json!({
                            "inode1": x.inode1, "inode2": x.inode2,
                            "igen1": x.igen1, "igen2": x.igen2,
                            "startoff1": x.startoff1, "startoff2": x.startoff2,
                            "blockcount": x.blockcount, "flags": x.flags,
                            "isize1": x.isize1, "isize2": x.isize2,
                        });
                    }
                    if let (&"ATTRI", Some(a)) = (t, attris.get(id)) {
                        v["attr"] = serde_json::json!({
                            "inode": a.ino, "op": xfskit::log::attr::op_name(a.op),
                            "filter": a.filter, "name": String::from_utf8_lossy(&a.name),
                            "name_len": a.name.len(), "value_len": a.value.len(),
                        });
                    }
                    v
                })
                .collect::<Vec<_>>(),
            "transaction_list": if args.transactions { serde_json::Value::Array(txs) } else { serde_json::Value::Null },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "log: {} blocks of 512 bytes, {state}",
        fs.geometry().log_blocks as u64 * fs.geometry().block_size as u64 / 512
    );
    println!("head: block {} cycle {}", e.head_blk, e.head_cycle);
    println!("tail: block {} (lsn {})", e.tail_blk, lsn(e.tail_lsn));
    if !e.torn.is_empty() {
        println!("torn records dropped at the head: blocks {:?}", e.torn);
    }
    println!(
        "records: {}  committed transactions: {}  uncommitted: {}",
        c.records.len(),
        c.transactions.len(),
        c.uncommitted
    );
    let items: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "items: {}",
        if items.is_empty() {
            "none".into()
        } else {
            items.join(", ")
        }
    );
    for (t, id, l) in &unfinished {
        println!("unfinished intent: {t} id {id:#x} lsn {}", lsn(*l));
        if let (&"XMI", Some(x)) = (t, xmis.get(id)) {
            println!(
                "  exchange inode {} blocks {}.. with inode {} blocks {}..: {} blocks left, flags {:#x}",
                x.inode1, x.startoff1, x.inode2, x.startoff2, x.blockcount, x.flags
            );
        }
        if let (&"ATTRI", Some(a)) = (t, attris.get(id)) {
            println!(
                "  attribute {} of inode {}: filter {:#x}, name {:?} ({} bytes), value of {} bytes",
                xfskit::log::attr::op_name(a.op),
                a.ino,
                a.filter,
                String::from_utf8_lossy(&a.name),
                a.name.len(),
                a.value.len()
            );
        }
    }
    if args.transactions {
        for t in &c.transactions {
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for it in &t.items {
                *per.entry(item_type_name(it.item_type())).or_insert(0) += 1;
            }
            let s: Vec<String> = per.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!(
                "trans {:#010x} lsn {} blocks {}..{} type {}: {}",
                t.tid,
                lsn(t.lsn),
                t.start_blk,
                t.commit_blk,
                t.trans_type,
                s.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
