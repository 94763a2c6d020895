//! `xfskit recover`: replay the log into the image, as a kernel mount would.

use crate::cmd::out::{errln, outln};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::log::recover::RecoverOptions;

/// The long help of `xfskit recover`.
pub const LONG_ABOUT: &str = "Replay the log of an XFS image in place, as the kernel does when it
mounts a filesystem that was not cleanly unmounted.

The whole live log is read and checked first (head and tail found as the
kernel finds them, a torn write at the head dropped, every record's CRC
verified) and the committed transactions are replayed into memory: buffers
(skipped where the block on disk is already newer or was freed later),
inodes and new inode chunks. Only then is anything written: the replayed
blocks, the superblock's free space and inode counters recomputed from the
AG headers, and an unmount record at the head, so the log is clean
afterwards and the kernel, xfs_repair and xfskit open the image without
replaying anything. Then, as the kernel does at the end of recovery, the
inodes left on the AGI unlinked lists (unlinked while still open) are freed,
and so are the copy-on-write staging extents (when the refcount btree is a
single leaf; a warning names the AGs where they were left).

Deferred work the log promises but does not show finished is finished as
the kernel finishes it, in log order: extent frees (EFI without EFD),
reverse-mapping updates of every kind (RUI), reference count changes (CUI),
block mappings (BUI), and mapping exchanges between two files (XMI, from
XFS_IOC_EXCHANGE_RANGE: continued from the logged offsets, one pair of
mappings per transaction, sizes and reflink flags set at the end as the
kernel sets them; checked against the inodes in memory before anything is
written), and logged extended attribute updates (ATTRI: a set, replace or
remove of one attribute, user, trusted or security; every ATTRI of the log
is checked as the kernel checks it, and a bad one is an error naming its
log record), parent pointer updates included (set, remove, replace, after
the inode's generation is checked).

A clean log is left untouched. To read a dirty image without changing it,
use the other commands directly: they replay the log in memory.

An external log (mkfs.xfs -l logdev=) is read from and written to the
device given with --logdev.

Exit codes: 0 recovered (or already clean); 3 unfinished intents of another kind or an
external log without --logdev; 4 I/O error; 5 the log or the metadata it names is corrupt
(nothing was written).

Examples:
  xfskit recover disk.img
  xfskit recover --json disk.img
  xfskit recover --logdev log.img disk.img";

/// Arguments of `xfskit recover`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device (opened read-write).
    pub image: PathBuf,
    /// The external log device of a filesystem made with `mkfs.xfs -l
    /// logdev=` (as `mount -o logdev=`): the log is replayed from it and
    /// left clean there.
    #[arg(long, value_name = "FILE")]
    pub logdev: Option<PathBuf>,
    /// Write the replay even if intents are left unfinished.
    #[arg(long)]
    pub allow_unfinished_intents: bool,
    /// Print a JSON report.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let opts = RecoverOptions {
        allow_unfinished_intents: args.allow_unfinished_intents,
        logdev: args.logdev.clone(),
        ..Default::default()
    };
    let r = xfskit::Fs::recover(&args.image, &opts)?;
    let s = &r.stats;
    if args.json {
        let v = serde_json::json!({
            "was_clean": r.was_clean,
            "head_block": r.head_blk,
            "tail_block": r.tail_blk,
            "records": r.records,
            "torn_records": r.torn,
            "transactions": s.transactions,
            "buffers_replayed": s.bufs_replayed,
            "buffers_newer": s.bufs_newer,
            "buffers_cancelled": s.bufs_cancelled,
            "inodes_replayed": s.inodes_replayed,
            "inodes_newer": s.inodes_newer,
            "inodes_cancelled": s.inodes_cancelled,
            "icreates": s.icreates,
            "dquots_replayed": s.dquots_replayed,
            "dquots_newer": s.dquots_newer,
            "unfinished_intents": s.unfinished_intents.len(),
            "sectors_written": r.sectors_written,
            "unlinked_freed": r.unlinked.freed,
            "unlinked_kept": r.unlinked.kept,
            "cow_staging_freed": r.cow.freed,
            "efi_extents_freed": r.efi_extents_freed,
            "rui_updates": r.rui_updates,
            "xmi_mappings_exchanged": r.xmi_exchanged,
            "warnings": s.warnings,
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
    } else if r.was_clean {
        outln!("log is clean: nothing to recover");
    } else {
        outln!(
            "recovered: {} records, {} transactions from tail block {} to head block {}",
            r.records,
            s.transactions,
            r.tail_blk,
            r.head_blk
        );
        outln!(
            "buffers: {} replayed, {} already newer, {} cancelled; inodes: {} replayed, {} already newer, {} cancelled; inode chunks: {}",
            s.bufs_replayed, s.bufs_newer, s.bufs_cancelled, s.inodes_replayed, s.inodes_newer,
            s.inodes_cancelled, s.icreates
        );
        if !r.torn.is_empty() {
            outln!("torn records dropped at the head: blocks {:?}", r.torn);
        }
        outln!("{} sectors written; the log is clean", r.sectors_written);
        if r.unlinked.freed + r.unlinked.kept > 0 {
            outln!(
                "unlinked lists: {} inodes freed, {} still linked taken off",
                r.unlinked.freed,
                r.unlinked.kept
            );
        }
    }
    if !args.json && r.efi_extents_freed + r.rui_updates > 0 {
        outln!(
            "unfinished intents finished: {} extents freed, {} mapping, reference count and attribute updates done",
            r.efi_extents_freed, r.rui_updates
        );
    }
    if !args.json && r.xmi_exchanged > 0 {
        outln!(
            "unfinished mapping exchanges finished: {} pairs of mappings exchanged",
            r.xmi_exchanged
        );
    }
    if !args.json && r.cow.freed > 0 {
        outln!("copy-on-write staging extents freed: {}", r.cow.freed);
    }
    for ag in &r.cow.left_in_ags {
        errln!("xfskit: warning: AG {ag}: copy-on-write staging extents in a multi-level refcount btree were left (the kernel frees them at mount)");
    }
    for w in &s.warnings {
        errln!("xfskit: warning: {w}");
    }
    for (t, id, l) in s
        .unfinished_intents
        .iter()
        .filter(|(t, _, _)| !xfskit::log::intents::can_finish(t))
    {
        errln!(
            "xfskit: warning: unfinished intent {t} {id:#x} (lsn {}/{}) left as is",
            l >> 32,
            *l as u32
        );
    }
    Ok(ExitCode::SUCCESS)
}
