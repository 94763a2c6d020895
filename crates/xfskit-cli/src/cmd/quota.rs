//! `xfskit quota`: the quota records of an image (`xfs_quota -x -c
//! report`, offline).

use crate::cmd::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::quota::{Dquot, Kind};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Print the quota records of an XFS image, like `xfs_quota -x -c report`.

For each kind of quota the filesystem accounts (user, group, project; or
those chosen with -u, -g, -p), one line per id that uses anything or has a
limit (--all: every record): blocks used in KiB, their soft and hard
limits, inodes used and their limits, realtime blocks when any are used,
and the grace periods running. The counts are what the quota files say;
whether they are current is what the superblock's \"checked\" flags say
(`xfskit info --json | jq .quota`) and what `xfskit check` compares.

Quota files are made by the first quota mount of the kernel, or offline by
`xfskit quotacheck`; a filesystem made with quota options has none before
it. On a filesystem with a metadata directory (mkfs.xfs 6.13 and later with
-m metadir=1) they are found under its /quota.

Exit status: 0 on success; 2 usage error; 3 unsupported; 4 I/O error; 5 a
quota record is damaged (named with its file block).

Examples:
  xfskit quota disk.img
  xfskit quota -u --json disk.img | jq '.[] | select(.blocks_kib > 1048576)'";

/// The kinds of quota a command is about (none given: all three).
#[derive(clap::Args)]
pub struct KindArgs {
    /// User quotas.
    #[arg(short = 'u', long)]
    pub user: bool,
    /// Group quotas.
    #[arg(short = 'g', long)]
    pub group: bool,
    /// Project quotas.
    #[arg(short = 'p', long)]
    pub project: bool,
}

impl KindArgs {
    /// Whether user, group and project quotas are chosen.
    pub fn chosen(&self) -> [bool; 3] {
        let any = self.user || self.group || self.project;
        [!any || self.user, !any || self.group, !any || self.project]
    }
}

/// Arguments of `xfskit quota`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    #[command(flatten)]
    pub kinds: KindArgs,
    /// Every record, also those with no usage and no limit.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Print a JSON array of records.
    #[arg(long)]
    pub json: bool,
}

fn kib(blocks: u64, bs: u64) -> u64 {
    blocks * bs / 1024
}

fn record(q: &Dquot, bs: u64) -> serde_json::Value {
    serde_json::json!({
        "kind": q.kind.name(),
        "id": q.id,
        "blocks": q.blocks,
        "blocks_kib": kib(q.blocks, bs),
        "blocks_soft_kib": kib(q.blocks_soft, bs),
        "blocks_hard_kib": kib(q.blocks_hard, bs),
        "inodes": q.inodes,
        "inodes_soft": q.inodes_soft,
        "inodes_hard": q.inodes_hard,
        "rtblocks": q.rtblocks,
        "rtblocks_soft_kib": kib(q.rtblocks_soft, bs),
        "rtblocks_hard_kib": kib(q.rtblocks_hard, bs),
        "blocks_timer": q.blocks_timer,
        "inodes_timer": q.inodes_timer,
        "rtblocks_timer": q.rtblocks_timer,
        "blocks_warnings": q.blocks_warns,
        "inodes_warnings": q.inodes_warns,
        "rtblocks_warnings": q.rtblocks_warns,
    })
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open_in(&args.image, &args.disk, false)?;
    let bs = u64::from(fs.geometry().block_size);
    let want = args.kinds.chosen();
    let chosen: Vec<Kind> = Kind::ALL
        .into_iter()
        .zip(want)
        .filter_map(|(k, w)| w.then_some(k))
        .collect();
    let mut all = Vec::new();
    let mut none = Vec::new();
    for k in chosen {
        if xfskit::quota::quota_file(&fs, k)?.is_none() {
            none.push(k);
            continue;
        }
        let recs = xfskit::quota::read(&fs, k)?;
        all.extend(
            recs.into_iter()
                .filter(|q| args.all || q.id == 0 || !q.is_empty()),
        );
    }
    if args.json {
        let v: Vec<_> = all.iter().map(|q| record(q, bs)).collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    for k in none {
        outln!("{} quota: not accounted, or no quota file yet", k.name());
    }
    let mut last = None;
    for q in &all {
        if last != Some(q.kind) {
            if last.is_some() {
                outln!();
            }
            let rt = all.iter().any(|r| r.kind == q.kind && r.rtblocks > 0);
            outln!("{} quota", q.kind.name());
            outln!(
                "{:<12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}{}",
                "ID",
                "KiB used",
                "KiB soft",
                "KiB hard",
                "inodes",
                "soft",
                "hard",
                if rt { "    RT KiB used" } else { "" }
            );
            last = Some(q.kind);
        }
        let rt = all.iter().any(|r| r.kind == q.kind && r.rtblocks > 0);
        let rtcol = if rt {
            format!(" {:>14}", kib(q.rtblocks, bs))
        } else {
            String::new()
        };
        outln!(
            "#{:<11} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}{}",
            q.id,
            kib(q.blocks, bs),
            kib(q.blocks_soft, bs),
            kib(q.blocks_hard, bs),
            q.inodes,
            q.inodes_soft,
            q.inodes_hard,
            rtcol
        );
    }
    Ok(ExitCode::SUCCESS)
}
