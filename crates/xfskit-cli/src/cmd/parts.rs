//! `xfskit parts`: the partitions of a disk image and what each holds.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::disk::{self, Listing};
use xfskit::Error;

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "List the partitions of a disk image and what each holds.

The image may be a raw disk or a qcow2 file (with its backing files). MBR
(with logical partitions) and GPT tables are read; a damaged primary GPT is
replaced by its backup, with a warning. The logical volumes of LVM2 physical
volumes (on a partition or the whole disk) follow, with their content. Each partition's content is named by
its magic numbers: xfs, ext2/3/4, btrfs, vfat, ntfs, swap, LVM2 member,
crypto_LUKS, iso9660, squashfs. Numbers are those Linux gives (sdaN) and
those --partition takes.

Exit status: 0 on success, 3 if the image format is unsupported, 4 on I/O
errors, 5 if the partition table is corrupt.

Examples:
  xfskit parts rocky.qcow2
  xfskit parts --json disk.img";

/// Arguments of `xfskit parts`.
#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The disk image (raw or qcow2) or block device.
    pub image: PathBuf,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let l = match super::remote_url(&args.image) {
        Some(url) => list_remote(url)?,
        None => disk::list(&args.image)?,
    };
    let out = if args.json {
        format!("{:#}\n", json(&l))
    } else {
        text(&args.image.display().to_string(), &l)
    };
    // A closed pipe (`| head`) is not an error.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(ExitCode::SUCCESS)
}

fn text(name: &str, l: &Listing) -> String {
    let mut s = String::new();
    let _ = write!(s, "{name}: {} disk of {} bytes, ", l.format, l.disk_bytes);
    let Some(t) = &l.table else {
        let _ = writeln!(
            s,
            "no partition table; the whole disk holds {}",
            l.whole_disk.unwrap_or("no filesystem xfskit knows")
        );
        volumes(&mut s, l);
        return s;
    };
    let _ = writeln!(
        s,
        "{} partition table, {}-byte sectors",
        t.scheme, t.sector_size
    );
    for n in &t.notes {
        let _ = writeln!(s, "warning: {n}");
    }
    let _ = writeln!(
        s,
        "{:>3} {:>14} {:>14}  {:<22} {:<12} NAME",
        "N", "START", "SIZE", "TYPE", "CONTENT"
    );
    for f in &l.partitions {
        let p = &f.partition;
        let content = match (f.fits, f.content) {
            (false, _) => "PAST END",
            (true, Some(c)) => c,
            (true, None) => "-",
        };
        let _ = writeln!(
            s,
            "{:>3} {:>14} {:>14}  {:<22} {:<12} {}",
            p.number, p.start_bytes, p.size_bytes, p.type_name, content, p.label
        );
    }
    volumes(&mut s, l);
    s
}

/// The LVM2 logical volumes, after the partitions.
fn volumes(s: &mut String, l: &Listing) {
    for n in &l.notes {
        let _ = writeln!(s, "warning: {n}");
    }
    if l.volumes.is_empty() {
        return;
    }
    let _ = writeln!(s, "LVM2 logical volumes:");
    let _ = writeln!(
        s,
        "{:<24} {:>9} {:>14}  CONTENT",
        "VG/LV", "PARTITION", "SIZE"
    );
    for v in &l.volumes {
        let part = v.partition.map_or("disk".into(), |n| n.to_string());
        let content = match (&v.lv.unsupported, v.content) {
            (Some(why), _) => format!("not readable: {why}"),
            (None, c) => c.unwrap_or("-").to_string(),
        };
        let _ = writeln!(
            s,
            "{:<24} {:>9} {:>14}  {content}",
            v.path(),
            part,
            v.lv.size_bytes
        );
    }
}

fn json(l: &Listing) -> serde_json::Value {
    let parts: Vec<_> = l
        .partitions
        .iter()
        .map(|f| {
            let p = &f.partition;
            serde_json::json!({
                "number": p.number,
                "start_bytes": p.start_bytes,
                "size_bytes": p.size_bytes,
                "type": p.type_id,
                "type_name": p.type_name,
                "name": p.label,
                "content": f.content,
                "past_end": !f.fits,
            })
        })
        .collect();
    let volumes: Vec<_> = l
        .volumes
        .iter()
        .map(|v| {
            serde_json::json!({
                "vg": v.lv.vg,
                "lv": v.lv.name,
                "partition": v.partition,
                "size_bytes": v.lv.size_bytes,
                "content": v.content,
                "unsupported": v.lv.unsupported,
            })
        })
        .collect();
    let mut warnings = l
        .table
        .as_ref()
        .map(|t| t.notes.clone())
        .unwrap_or_default();
    warnings.extend(l.notes.iter().cloned());
    serde_json::json!({
        "format": l.format.to_string(),
        "disk_bytes": l.disk_bytes,
        "table": l.table.as_ref().map(|t| t.scheme.to_string()),
        "sector_size": l.table.as_ref().map(|t| t.sector_size),
        "warnings": warnings,
        "volumes": volumes,
        "whole_disk": l.whole_disk,
        "partitions": parts,
    })
}

#[cfg(feature = "remote")]
fn list_remote(url: &str) -> Result<disk::Listing, Error> {
    xfskit_remote::list(url, &[])
}

#[cfg(not(feature = "remote"))]
fn list_remote(url: &str) -> Result<disk::Listing, Error> {
    Err(Error::Unsupported(format!(
        "{url}: this xfskit was built without the `remote` feature"
    )))
}
