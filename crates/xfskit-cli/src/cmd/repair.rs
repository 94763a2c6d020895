//! `xfskit repair`: xfs_repair's work offline, its first steps so far.

use crate::cmd::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use xfskit::repair::{repair, RepairOptions};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Repair an unmounted XFS filesystem, as xfs_repair does, on any image xfskit
opens (a bare filesystem, a partition of a raw or qcow2 disk, an LVM volume, a
VM disk file).

In xfs_repair's order: a dirty log is first replayed in place, exactly as the
kernel's mount replays it, so no committed change is lost (xfs_repair refuses
such a filesystem until -L destroys the log). A dirty log that cannot be
replayed (a corrupt record, an intent xfskit cannot finish) is refused, the
error naming the log problem, unless --zero-log (-L) is given: the log is then
cleared as xfs_repair -L clears it, not replayed, and what it held is lost
(the report says what: its transactions, records and items). The cleared log
is clean, its head at block 0 of a cycle 3 past the highest cycle the old
log or any metadata LSN shows, so that the kernel finds no metadata ahead of
the log. --zero-log on a clean log writes nothing (xfs_repair -L formats it
anew): a repair of a clean image changes nothing (but for an image marked
needsrepair by an interrupted repair, whose log is cleared again).

Then the filesystem is checked as `xfskit check` checks it, which finds what
xfs_repair -n finds; then the fixes are made in rounds, each followed by the
check, until nothing more can be fixed: a primary superblock that cannot be
read found again from the secondaries (first, as xfs_repair finds it: the
device is searched for a copy that most of the others agree with); the
primary's fields that xfs_repair resets on their own reset (flags, shared_vn,
inprogress, quota fields without quotas, stripe unit and width, unknown
log-incompatible bits, the root and realtime inode numbers); secondary
superblocks rewritten from a sound primary; AG header counters set to what their btrees hold and the
superblock's counters to the sums over the AGs, when the btrees are sound;
inode CRCs, magic numbers and versions written again on otherwise sound
inodes, stray flags and fields cleared, nblocks set to what the forks map, an
unreadable attribute fork cleared, a data fork that cannot be read (or maps
less than its inode counts) rebuilt from the inode's reverse mappings; and,
through the journal, AG btrees rebuilt, inodes that
cannot be decoded cleared, reverse mappings no owner holds removed, blocks
nothing uses freed, link counts set, entries naming free inodes removed, entry
file types and '..' set right, parent pointers made to match the entries, and
every inode no directory names named again: back in its old directory under
its old name where a parent pointer says it, else in lost+found (under the
parent pointer's name, or its inode number); last, quota counts that do not
match the files counted again into their records (a damaged record made anew).
Fixes that allocate or free space wait until nothing unfixable is wrong. A v5 filesystem carries the needsrepair
feature while fixes are written, so no kernel mounts it half repaired; a
repair that was interrupted is finished by running it again. Last, what is
still wrong is listed as not repaired (a damaged bmbt, directories without
parent pointers to refill them: xfs_repair may fix those). The AG btrees
(free space, rmap, inode, free inode, refcount) are rebuilt when damaged.
Metadata stamped with an LSN at or past the log head, which the kernel
refuses, gets the log formatted past it, as xfs_repair formats it.

--dry-run says what would be done and writes nothing (the log is replayed in
memory for the check; with --zero-log the check reads the filesystem without
it, and the report says what clearing it would lose). --undo FILE saves what the repair overwrites, for
`xfskit undo FILE IMAGE`. Repair on a clean image writes nothing.

Exit codes: 0 the filesystem is clean (after the fixes; with --dry-run: it
was clean); 1 problems remain (with --dry-run: problems were found); 2 usage
error; 3 unsupported (a dirty log xfskit cannot replay, without --zero-log);
4 I/O error; 5 corrupt beyond what repair can read (a dirty log that cannot be
replayed for its damage, without --zero-log).

Examples:
  xfskit repair --dry-run disk.img
  xfskit repair --undo repair.undo disk.img
  xfskit repair --dry-run --zero-log disk.img   # what clearing the log loses
  xfskit repair -L disk.img                     # clear a log that cannot be replayed";

/// Arguments of `xfskit repair`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device (unmounted).
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// Say what would be done; write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Clear a dirty log instead of replaying it, as xfs_repair -L does:
    /// the changes it holds are lost. A clean log is left as it is.
    #[arg(long, short = 'L')]
    pub zero_log: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The check's bound on memory, as for `xfskit check --memory`.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let memory = super::parse_memory(args.memory.as_deref())?;
    if args.dry_run && args.disk.undo.is_some() {
        return Err(xfskit::Error::Invalid(
            "--dry-run writes nothing: no --undo".into(),
        ));
    }
    let img = xfskit::disk::open(&args.image, &args.disk.image_options(!args.dry_run))?;
    for note in &img.notes {
        crate::cmd::out::errln!("xfskit: warning: {}: {note}", args.image.display());
    }
    let dev: Arc<dyn xfskit::dev::Device> = Arc::from(super::with_undo(img.device, &args.disk)?);
    let opts = RepairOptions {
        dry_run: args.dry_run,
        zero_log: args.zero_log,
        memory,
        open: super::with_rtdev(&xfskit::OpenOptions::default(), &args.disk),
    };
    let r = repair(dev, &opts)?;
    let clean = if args.dry_run {
        r.found_total == 0
    } else {
        r.is_clean()
    };
    if args.json {
        let probs = |v: &[xfskit::check::Problem]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|p| {
                    serde_json::json!({
                        "what": p.what,
                        "location": p.location.to_string(),
                        "detail": p.detail,
                    })
                })
                .collect()
        };
        let v = serde_json::json!({
            "dry_run": args.dry_run,
            "log": r.log,
            "log_lost": r.log_lost.as_ref().map(|l| serde_json::json!({
                "transactions": l.transactions,
                "records": l.records,
                "uncommitted": l.uncommitted,
                "unfinished_intents": l.unfinished_intents,
                "items": l.items,
                "tail_block": l.tail_head.map(|t| t.0),
                "head_block": l.tail_head.map(|t| t.1),
                "unreadable": l.unreadable,
            })),
            "found": probs(&r.found),
            "found_total": r.found_total,
            "fixes": r.fixes,
            "remaining": probs(&r.remaining),
            "unchecked": r.unchecked,
            "clean": clean,
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
    } else {
        if let Some(l) = &r.log {
            outln!("log: {l}");
        }
        if r.found_total == 0 && r.log_lost.is_some() {
            outln!("no problems found");
        } else if r.found_total == 0 {
            outln!("no problems found: nothing to repair");
        } else {
            outln!("found {} problems:", r.found_total);
            for p in &r.found {
                outln!("  {p}");
            }
        }
        let fixed = if args.dry_run { "would fix" } else { "fixed" };
        for f in &r.fixes {
            outln!("{fixed}: {f}");
        }
        if !r.remaining.is_empty() {
            let verb = if args.dry_run {
                "would remain"
            } else {
                "not repaired"
            };
            outln!("{verb} ({}):", r.remaining.len());
            for p in &r.remaining {
                outln!("  {p}");
            }
        } else if r.found_total > 0 && !args.dry_run {
            outln!("the filesystem is clean");
        }
        for u in &r.unchecked {
            outln!("not checked: {u}");
        }
    }
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
