//! `xfskit grow`: grow the XFS data section of an unmounted image, as
//! `xfs_growfs -d` does on a mounted filesystem.

use crate::cmd::out::{errln, outln};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::grow;

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Grow the XFS filesystem in an image, offline, as xfs_growfs -d grows a
mounted one: the image is extended when SIZE asks for more than it holds,
the last AG is extended to a full AG, new AGs are added after it (the
last one possibly shorter), and every superblock gets the new size and
AG count.

IMAGE is a bare filesystem (raw file), or a GPT or MBR disk, raw or
qcow2, whose XFS partition is the last one (--partition N to name it; on
an MBR disk a primary partition, 1 to 4, grown up to the 2 TiB an MBR
entry can hold), or an LVM2 linear volume on such a disk (--lv VG/LV to
name it), its PV the last partition or the whole disk: the PV is grown
to fill the partition or disk as pvresize does, then the volume takes
every free extent as lvextend -l +100%FREE does (its last segment
extended, new linear segments after it), in new metadata committed by
one write of the metadata area's header. SIZE is the new
size of the image (of the filesystem for a bare one; of the whole disk
otherwise) in bytes, with an optional binary suffix (K, M, G, T, P, E:
powers of 1024), or `+SIZE` for that much more than now. Without SIZE
the filesystem grows to fill the image as it is (a file extended
beforehand with truncate -s, a disk with qemu-img resize). A disk is
grown in this order: the raw file's length or the qcow2 virtual size
(its header; refused when the qcow2 L1 table would have to move, or the
file has snapshots or a backing file), then the GPT (the backup entry
array and header written at the new end first, then the primary with the
partition extended to the last usable sector, and the protective MBR) or
the MBR entry (one sector),
then the filesystem to fill the partition. As the kernel does, the size
is cut to whole filesystem blocks and a trailing piece after the last
whole AG smaller than 64 blocks is left unused (a message says how much).

The result is what the kernel's xfs_growfs leaves: the same superblock
fields, AG headers, free-space btrees and reverse mappings (checked
against xfs_growfs on a loop mount in the tests). New AGs get their
headers and empty btrees with an empty free list; the grown last AG's new
space is one free extent (joined to a free extent at its old end). A
warning is printed when the filesystem grows past 10 times its size: the
AG size stays what mkfs chose for the small filesystem, so a large one
ends up with many small AGs (mkfs.xfs on the final size gives fewer).

Crash safety, as the kernel's: the new AGs' headers are written and
flushed first, in space the old filesystem does not reference; then one
logged transaction changes the primary superblock and the old last AG;
then the secondary superblocks are rewritten. A crash before the
transaction reaches the log leaves the old filesystem; after it, log
recovery (xfskit's or the kernel's at mount) gives the new one. Running
the same command again after an interrupted run finishes it (secondary
superblocks left behind are brought in line).

Refused (exit 3): shrinking; v4 filesystems; a realtime section; an
external log; a metadata directory (realtime groups); a partition that
is not the disk's last (on an MBR disk, a logical one); an LVM volume
group of more than one PV, or with segments other than linear and
striped ones; a last AG whose free-space btrees have more than one level
(not done yet).

Exit codes: 0 done (or nothing to do); 2 usage error (a bad SIZE); 3
unsupported (see above); 4 I/O error; 5 corrupt filesystem.

Examples:
  xfskit grow disk.img 20G
  xfskit grow disk.img +10G
  xfskit grow vm.qcow2 20G                   # GPT disk: disk, table, partition, XFS
  xfskit grow --lv vg0/root disk.img 40G     # LVM: disk, table, PV, volume, XFS
  truncate -s 8G disk.img && xfskit grow disk.img";

/// Arguments of `xfskit grow`.
#[derive(clap::Args)]
pub struct Args {
    /// The image: a bare filesystem, or a raw or qcow2 disk (GPT, MBR, an
    /// LVM volume).
    pub image: PathBuf,
    /// New size of the image (bytes, K/M/G/T/P/E suffixes), `+SIZE` to
    /// add, or absent to fill the image as it is.
    pub size: Option<String>,
    #[command(flatten)]
    pub disk: super::DiskArgs,
}

/// Parses `20G`, `+10G`, `1048576`: (relative, bytes).
pub fn parse_size(s: &str) -> Option<(bool, u64)> {
    let (rel, s) = match s.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let s = s.trim();
    let (num, shift) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'P' => 50,
                'E' => 60,
                _ => return None,
            };
            (&s[..i], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = num.parse().ok()?;
    n.checked_mul(1u64 << shift).map(|v| (rel, v))
}

fn refuse(image: &std::path::Path, msg: &str) -> ExitCode {
    errln!("xfskit grow: {}: {msg}", image.display());
    ExitCode::from(3)
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let size = match &args.size {
        Some(s) => match parse_size(s) {
            Some(v) => Some(v),
            None => {
                errln!("xfskit grow: invalid SIZE: {s} (bytes with an optional K, M, G, T, P or E suffix, or +SIZE)");
                return Ok(ExitCode::from(2));
            }
        },
        None => None,
    };
    if args.disk.rtdev.is_some() {
        return Ok(refuse(&args.image, "a realtime section cannot be grown"));
    }
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(&args.image).map_err(xfskit::Error::Io)?;
        f.read_exact(&mut magic).map_err(xfskit::Error::Io)?;
    }
    if &magic != b"XFSB" {
        return grow_disk(&args, size);
    }
    if args.disk.partition.is_some() {
        return Ok(refuse(
            &args.image,
            "--partition: the image is a bare filesystem",
        ));
    }
    let geo = match checked_geometry(&args) {
        Ok(g) => g,
        Err(code) => return Ok(code),
    };
    let bs = u64::from(geo.block_size);
    let file_len = std::fs::metadata(&args.image)
        .map_err(xfskit::Error::Io)?
        .len();
    let cur = geo.data_blocks * bs;
    let want = match size {
        None => file_len,
        Some((true, add)) => cur.saturating_add(add),
        Some((false, v)) => v,
    };
    let file_len = if file_len < want { want } else { file_len };
    let _ = file_len;
    finish(&args, &geo, want, true)
}

/// The filesystem's geometry, checked for grow (exit code on refusal).
fn checked_geometry(args: &Args) -> Result<xfskit::Geometry, ExitCode> {
    let fs = match super::open_in(&args.image, &args.disk, true) {
        Ok(f) => f,
        Err(e) => {
            errln!(
                "xfskit grow: {}: {}",
                args.image.display(),
                super::message(&e)
            );
            return Err(ExitCode::from(super::code_of(&e)));
        }
    };
    let geo = fs.geometry().clone();
    drop(fs);
    if let Err(e) = grow::check_supported(&geo) {
        errln!(
            "xfskit grow: {}: {}",
            args.image.display(),
            super::message(&e)
        );
        return Err(ExitCode::from(super::code_of(&e)));
    }
    Ok(geo)
}

/// A qcow2 or raw disk: SIZE is the disk's new size; the disk is grown,
/// then its partition table (GPT or MBR) and the partition, then the LVM
/// PV and volume when the filesystem is in one, then the filesystem.
fn grow_disk(args: &Args, size: Option<(bool, u64)>) -> Result<ExitCode, xfskit::Error> {
    use xfskit::disk::{self, Scheme};
    let geo = match checked_geometry(args) {
        Ok(g) => g,
        Err(code) => return Ok(code),
    };
    let (dev, format) = disk::open_disk(&args.image, false)?;
    let cur = dev.len();
    let table = disk::read_table(&*dev)?;
    drop(dev);
    // The partition: named, or the one holding this filesystem; or the
    // LVM volume, named or found, and the partition of its PV.
    let opened = disk::open(
        &args.image,
        &disk::ImageOptions {
            partition: args.disk.partition,
            lv: args.disk.lv.clone(),
            writable: false,
        },
    )?;
    let part_len = opened.device.len();
    let volume = opened.volume.clone();
    let pv_partition = opened.partition.as_ref().map(|p| p.number);
    drop(opened);
    let Some(table) = table.filter(|_| volume.is_none() || pv_partition.is_some()) else {
        if let Some(v) = &volume {
            let want = match grow_container(args, size, cur, format)? {
                Ok(w) => w,
                Err(code) => return Ok(code),
            };
            return grow_volume(args, v, (0, want), &geo);
        }
        return Ok(refuse(
            &args.image,
            "no partition table and no XFS superblock at its start",
        ));
    };
    let number = match (
        args.disk.partition,
        pv_partition.filter(|_| volume.is_some()),
    ) {
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => {
            let mut xfs = Vec::new();
            for p in &table.partitions {
                if p.size_bytes == part_len {
                    xfs.push(p.number);
                }
            }
            match xfs.as_slice() {
                [n] => *n,
                _ => return Ok(refuse(&args.image, "name the partition with --partition N")),
            }
        }
    };
    if let Err(code) = grow_container(args, size, cur, format)? {
        return Ok(code);
    }
    let (dev, _) = disk::open_disk(&args.image, true)?;
    let grown = match table.scheme {
        Scheme::Gpt => disk::grow::gpt_grow(&*dev, number),
        Scheme::Mbr => disk::grow::mbr_grow(&*dev, number),
    };
    let (start, len) = match grown {
        Ok(r) => r,
        Err(e) => return Ok(failed(args, &e)),
    };
    drop(dev);
    if let Some(v) = &volume {
        return grow_volume(args, v, (start, len), &geo);
    }
    let mut a = args.disk.clone();
    a.partition = Some(number);
    let args = Args {
        image: args.image.clone(),
        size: None,
        disk: a,
    };
    finish(&args, &geo, len, false)
}

/// Says why a step failed: the exit code.
fn failed(args: &Args, e: &xfskit::Error) -> ExitCode {
    errln!(
        "xfskit grow: {}: {}",
        args.image.display(),
        super::message(e)
    );
    ExitCode::from(super::code_of(e))
}

/// Grows the disk file (of `cur` bytes) to SIZE: the qcow2 virtual size,
/// or the raw file's length. The new size, or the exit code of a refusal.
fn grow_container(
    args: &Args,
    size: Option<(bool, u64)>,
    cur: u64,
    format: xfskit::disk::Format,
) -> Result<Result<u64, ExitCode>, xfskit::Error> {
    let want = match size {
        None => cur,
        Some((true, add)) => cur.saturating_add(add),
        Some((false, v)) => v,
    } / 512
        * 512;
    if want < cur {
        return Ok(Err(refuse(
            &args.image,
            &format!("the disk is {cur} bytes; shrinking it is not supported"),
        )));
    }
    match format {
        xfskit::disk::Format::Qcow2 => {
            if let Err(e) = xfskit::disk::grow::qcow2_resize(&args.image, want) {
                return Ok(Err(failed(args, &e)));
            }
        }
        _ => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&args.image)
                .map_err(xfskit::Error::Io)?;
            if f.metadata().map_err(xfskit::Error::Io)?.len() < want {
                f.set_len(want).map_err(xfskit::Error::Io)?;
                f.sync_all().map_err(xfskit::Error::Io)?;
            }
        }
    }
    Ok(Ok(want))
}

/// An LVM volume `vg_lv` ("VG/LV") whose PV lies at `pv` (start, length in
/// bytes) of the disk, already grown (the disk, and the partition when
/// the PV is in one): the PV grown to fill that space and the volume by
/// every free extent, then the filesystem to fill the volume.
fn grow_volume(
    args: &Args,
    vg_lv: &str,
    pv: (u64, u64),
    geo: &xfskit::Geometry,
) -> Result<ExitCode, xfskit::Error> {
    use xfskit::disk;
    let (vg, lv) = vg_lv.split_once('/').unwrap_or((vg_lv, ""));
    let (dev, _) = disk::open_disk(&args.image, true)?;
    let lv_len = match disk::grow::lvm_grow(&dev, pv.0, pv.1, vg, lv) {
        Ok(n) => n,
        Err(e) => return Ok(failed(args, &e)),
    };
    drop(dev);
    let mut a = args.disk.clone();
    a.lv = Some(vg_lv.to_string());
    let args = Args {
        image: args.image.clone(),
        size: None,
        disk: a,
    };
    finish(&args, geo, lv_len, false)
}

/// Grows the filesystem to `want` bytes (extending a bare image file).
fn finish(
    args: &Args,
    geo: &xfskit::Geometry,
    want: u64,
    bare: bool,
) -> Result<ExitCode, xfskit::Error> {
    let bs = u64::from(geo.block_size);
    let plan = match grow::plan(geo, want / bs) {
        Ok(p) => p,
        Err(e) => {
            errln!(
                "xfskit grow: {}: {}",
                args.image.display(),
                super::message(&e)
            );
            return Ok(ExitCode::from(super::code_of(&e)));
        }
    };
    if plan.dropped > 0 && !plan.is_noop() {
        errln!(
            "xfskit grow: {}: the last {} blocks are too few for an AG (fewer than {}) and stay unused",
            args.image.display(),
            plan.dropped,
            grow::MIN_AG_BLOCKS
        );
    }
    if plan.new_dblocks > grow::WARN_FACTOR * plan.old_dblocks {
        errln!(
            "xfskit grow: warning: growing {}x leaves {} AGs of {} blocks; mkfs on the final size would make fewer, larger AGs",
            plan.new_dblocks / plan.old_dblocks.max(1),
            plan.new_agcount,
            plan.agblocks
        );
    }
    let need = plan.new_dblocks * bs;
    let file_len = std::fs::metadata(&args.image)
        .map_err(xfskit::Error::Io)?
        .len();
    if bare && file_len < need {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&args.image)
            .map_err(xfskit::Error::Io)?;
        f.set_len(need).map_err(xfskit::Error::Io)?;
        f.sync_all().map_err(xfskit::Error::Io)?;
    }
    let fs = super::edit::open_rw(&args.image, &args.disk)?;
    grow::grow(&fs, &plan)?;
    drop(fs);
    if plan.is_noop() {
        outln!("data size unchanged, skipping");
    } else {
        outln!(
            "data blocks changed from {} to {}",
            plan.old_dblocks,
            plan.new_dblocks
        );
    }
    Ok(ExitCode::SUCCESS)
}
