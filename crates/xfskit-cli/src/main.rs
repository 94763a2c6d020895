//! The `xfskit` command: one subcommand per file under `cmd/`.
//!
//! Exit codes: 0 success; 1 the image has problems (check) or a file was not
//! found; 2 usage errors; 3 unsupported or dirty filesystem; 4 I/O error;
//! 5 corrupt image; 6 extracted, but the destination refused some entries.

use crate::cmd::out::errln;
mod cmd;

/// mimalloc instead of glibc's allocator: the build hands memory allocated
/// on one thread (the source reader) to be freed on another (the engine's
/// workers), where glibc's arena locks make the workers sleep (a 100,000-file
/// build: 165 such sleeps of the worker in one run; user time 0.85 s with
/// glibc, 0.65-0.72 s with mimalloc). Without transparent huge pages
/// (`no_thp`): with them the same build's peak RSS is 590 MB instead of
/// 220 MB, and their page faults cost up to 1.8 s of system time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// A userspace engine for XFS filesystems: make, build, inspect, mount, scan
/// and check XFS images without root or a kernel driver.
#[derive(Parser)]
#[command(
    name = "xfskit",
    version,
    about = "Make, inspect, mount, scan and extract XFS filesystems in userspace",
    long_about = "xfskit reads and writes the XFS on-disk format without the kernel: make \
filesystems (mkfs), build populated images (build), inspect images (info, db, ls, cat, stat), copy files out (extract), \
edit images offline (cp, mkdir, rm, mv, ln, chmod, chown, touch, truncate, setfattr, getfattr, chattr, lsattr, chproj, lsproj), \
show or change the label and UUID (admin), grow a filesystem offline (grow), \
mount them through FUSE (mount), scan every inode in parallel (bulkstat), print a forensic \
timeline of every inode for mactime and plaso (timeline), and show or \
replay the log (log, recover). A log left dirty by a crash is replayed in memory when an \
image is opened to be read: the image is only read (but `mount -o ro`, as a kernel mount, \
replays it into the image).\n\n\
IMAGE may be a bare XFS filesystem, a partitioned disk (MBR or GPT, LVM2 linear volumes) or a \
qcow2 file (v2 or v3, compressed clusters and backing files included) holding either: the XFS \
partition or volume is found by its superblock, or named with --partition N or --lv VG/LV \
(see `xfskit parts`).\n\n\
Formats: every filesystem mkfs.xfs up to 6.15 makes is read and checked; v5 ones are written \
too, with metadata directories, parent pointers, exchange-range and realtime sections or \
groups (give the realtime device as --rtdev FILE) and external logs (give the log device as \
--logdev FILE, as mount -o logdev= takes it). Read-only, writing refused with exit 3: \
v4 (crc=0) filesystems, a deprecated format that Linux removes in 2030; zoned realtime \
sections, since a zone is written only at its write pointer and reclaimed by garbage \
collection, which xfskit does not do; a v5 log smaller than the kernel's minimum for the \
geometry, which Linux refuses to mount. Not opened (exit 3): needsrepair.\n\n\
Exit codes: 0 success; 1 not found, or problems found; 2 usage error; \
3 unsupported filesystem, no XFS on the disk, or intents recover cannot finish; \
4 I/O error; 5 corrupt metadata, log, partition table or qcow2 structure; 6 extracted \
(extract, cp out of an image) with some entries incomplete: the destination refused an \
xattr, a device node, a name or the space for a file, each reported. Several XFS \
partitions without --partition, or a --partition the disk lacks, are usage errors (2). \
A reader that closes the output early (`| head`) ends it quietly: the command still \
finishes its work and exits with its usual code.\n\n\
Every subcommand has a manual page: install them beside the program with \
`xfskit manpages`, then `man xfskit-build`. Shell completions: \
`xfskit completions bash|zsh|fish`.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print geometry and features, laid out like xfs_info.
    #[command(long_about = cmd::info::LONG_ABOUT)]
    Info(cmd::info::Args),
    /// List the partitions of a disk image (raw or qcow2) and what each holds.
    #[command(long_about = cmd::parts::LONG_ABOUT)]
    Parts(cmd::parts::Args),
    /// List a directory.
    #[command(long_about = cmd::ls::LONG_ABOUT)]
    Ls(cmd::ls::Args),
    /// Write a file's contents to standard output.
    #[command(long_about = cmd::cat::LONG_ABOUT)]
    Cat(cmd::cat::Args),
    /// Print the superblock and AG headers as xfs_db prints them.
    #[command(long_about = cmd::db::LONG_ABOUT)]
    Db(cmd::db::Args),
    /// Print every inode field, the xattrs and the extent map of a file.
    #[command(long_about = cmd::stat::LONG_ABOUT)]
    Stat(cmd::stat::Args),
    /// Copy the whole tree (or a subtree) out of an image.
    #[command(long_about = cmd::extract::LONG_ABOUT)]
    Extract(cmd::extract::Args),
    /// Mount an image through FUSE (read-write when the image is writable).
    Mount(cmd::mount::Args),
    /// Scan every allocated inode, one thread per AG.
    #[command(long_about = cmd::bulkstat::LONG_ABOUT)]
    Bulkstat(cmd::bulkstat::Args),
    /// Print a timeline body file (The Sleuth Kit's mactime format) of every inode.
    #[command(long_about = cmd::timeline::LONG_ABOUT)]
    Timeline(cmd::timeline::Args),
    /// Make an XFS filesystem (mkfs.xfs options and output).
    Mkfs(cmd::mkfs::Args),
    /// Check an unmounted image for consistency, like `xfs_repair -n`.
    Check(cmd::check::Args),
    /// Build a populated image from a directory or a tar archive.
    #[command(
        long_about = cmd::build::LONG_ABOUT,
        override_usage = "xfskit build [OPTIONS] SOURCE IMAGE [MKFS OPTIONS]"
    )]
    Build(cmd::build::Args),
    /// Show what the log holds: head, tail, records, transactions, items.
    #[command(long_about = cmd::log::LONG_ABOUT)]
    Log(cmd::log::Args),
    /// Replay the log in place, as a kernel mount would, and leave it clean.
    #[command(long_about = cmd::recover::LONG_ABOUT)]
    Recover(cmd::recover::Args),
    /// Repair an unmounted filesystem, as xfs_repair (its first steps so far).
    #[command(long_about = cmd::repair::LONG_ABOUT)]
    Repair(cmd::repair::Args),
    /// Copy files into an image (SRC... IMAGE:DEST) or out of it (IMAGE:SRC... DEST).
    #[command(long_about = cmd::edit::help::CP, after_help = cmd::edit::help::CP_EXAMPLES)]
    #[command(
        override_usage = "xfskit cp [OPTIONS] SRC... IMAGE:DEST\n       xfskit cp [OPTIONS] IMAGE:SRC... DEST"
    )]
    Cp(cmd::edit::cp::Args),
    /// Make directories in an image.
    #[command(long_about = cmd::edit::help::MKDIR)]
    Mkdir(cmd::edit::names::MkdirArgs),
    /// Remove files and directories from an image.
    #[command(long_about = cmd::edit::help::RM)]
    Rm(cmd::edit::names::RmArgs),
    /// Rename or move entries within an image.
    #[command(long_about = cmd::edit::help::MV)]
    Mv(cmd::edit::names::MvArgs),
    /// Make hard or symbolic links in an image.
    #[command(long_about = cmd::edit::help::LN)]
    Ln(cmd::edit::names::LnArgs),
    /// Change permission bits in an image.
    #[command(long_about = cmd::edit::help::CHMOD)]
    Chmod(cmd::edit::attrs::ChmodArgs),
    /// Change owners and groups in an image.
    #[command(long_about = cmd::edit::help::CHOWN)]
    Chown(cmd::edit::attrs::ChownArgs),
    /// Set file times in an image (creating missing files).
    #[command(long_about = cmd::edit::help::TOUCH)]
    Touch(cmd::edit::attrs::TouchArgs),
    /// Set file sizes in an image.
    #[command(long_about = cmd::edit::help::TRUNCATE)]
    Truncate(cmd::edit::attrs::TruncateArgs),
    /// Set or remove extended attributes in an image.
    #[command(long_about = cmd::edit::help::SETFATTR)]
    Setfattr(cmd::edit::xattr::SetArgs),
    /// Print extended attributes of files in an image.
    #[command(long_about = cmd::edit::help::GETFATTR)]
    Getfattr(cmd::edit::xattr::GetArgs),
    /// Change XFS inode flags in an image (xfs_io chattr).
    #[command(long_about = cmd::edit::help::CHATTR)]
    Chattr(cmd::edit::flags::ChattrArgs),
    /// List XFS inode flags of files in an image (xfs_io lsattr).
    #[command(long_about = cmd::edit::help::LSATTR)]
    Lsattr(cmd::edit::flags::LsattrArgs),
    /// Set project ids in an image (xfs_io chproj).
    #[command(long_about = cmd::edit::help::CHPROJ)]
    Chproj(cmd::edit::flags::ChprojArgs),
    /// Print project ids of files in an image (xfs_io lsproj).
    #[command(long_about = cmd::edit::help::LSPROJ)]
    Lsproj(cmd::edit::flags::LsprojArgs),
    /// Show or change the label and UUID (xfs_admin -l -u -L -U).
    #[command(long_about = cmd::admin::LONG_ABOUT)]
    Admin(cmd::admin::Args),
    /// Copy a filesystem's metadata into an xfs_metadump file (v2 or v1).
    #[command(long_about = cmd::metadump::LONG_ABOUT)]
    Metadump(cmd::metadump::Args),
    /// Restore an xfs_metadump file (v1 or v2) into a sparse image, as xfs_mdrestore.
    #[command(long_about = cmd::mdrestore::LONG_ABOUT)]
    Mdrestore(cmd::mdrestore::Args),
    /// Print the quota records (xfs_quota -x -c report, offline).
    #[command(long_about = cmd::quota::LONG_ABOUT)]
    Quota(cmd::quota::Args),
    /// Turn quotas on offline: make the quota files and count every inode.
    #[command(long_about = cmd::quotacheck::LONG_ABOUT)]
    Quotacheck(cmd::quotacheck::Args),
    /// List deleted files that can be recovered, with their names where they survive.
    #[command(long_about = cmd::deleted::DELETED_ABOUT, after_long_help = cmd::deleted::EVIDENCE)]
    Deleted(cmd::deleted::Args),
    /// Write deleted files out of an image into a directory, under their paths.
    #[command(long_about = cmd::deleted::UNDELETE_ABOUT, after_long_help = cmd::deleted::EVIDENCE)]
    Undelete(cmd::deleted::UndeleteArgs),
    /// Grow the filesystem in an image file offline (xfs_growfs -d).
    #[command(long_about = cmd::grow::LONG_ABOUT)]
    Grow(cmd::grow::Args),
    /// Put an image back as it was before a command run with --undo FILE.
    #[command(long_about = cmd::undo::LONG_ABOUT)]
    Undo(cmd::undo::Args),
    /// Write the manual pages of xfskit and every subcommand into a directory.
    #[command(long_about = cmd::docs::MANPAGES_ABOUT)]
    Manpages(cmd::docs::ManpagesArgs),
    /// Print a shell completion script (bash, zsh or fish).
    #[command(long_about = cmd::docs::COMPLETIONS_ABOUT)]
    Completions(cmd::docs::CompletionsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // --undo is taken by the commands that write into an image.
    let undo_asked =
        std::env::args_os().any(|a| a == "--undo" || a.to_string_lossy().starts_with("--undo="));
    let writes = matches!(
        cli.command,
        Command::Cp(_)
            | Command::Mkdir(_)
            | Command::Rm(_)
            | Command::Mv(_)
            | Command::Ln(_)
            | Command::Chmod(_)
            | Command::Chown(_)
            | Command::Touch(_)
            | Command::Truncate(_)
            | Command::Setfattr(_)
            | Command::Chattr(_)
            | Command::Chproj(_)
            | Command::Admin(_)
            | Command::Grow(_)
            | Command::Quotacheck(_)
            | Command::Mount(_)
            | Command::Repair(_)
    );
    if undo_asked && !writes {
        errln!("xfskit: --undo is for commands that write into an image (edits, admin, grow, quotacheck, mount, repair)");
        return ExitCode::from(2);
    }
    let r = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Parts(a) => cmd::parts::run(a),
        Command::Ls(a) => cmd::ls::run(a),
        Command::Cat(a) => cmd::cat::run(a),
        Command::Db(a) => cmd::db::run(a),
        Command::Stat(a) => cmd::stat::run(a),
        Command::Quota(a) => cmd::quota::run(a),
        Command::Quotacheck(a) => cmd::quotacheck::run(a),
        Command::Deleted(a) => cmd::deleted::run(a),
        Command::Undelete(a) => cmd::deleted::undelete(a),
        Command::Extract(a) => cmd::extract::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Bulkstat(a) => cmd::bulkstat::run(a),
        Command::Timeline(a) => cmd::timeline::run(a),
        Command::Mkfs(a) => cmd::mkfs::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Build(a) => cmd::build::run(a),
        Command::Log(a) => cmd::log::run(a),
        Command::Recover(a) => cmd::recover::run(a),
        Command::Repair(a) => cmd::repair::run(a),
        Command::Cp(a) => cmd::edit::cp::run(a),
        Command::Mkdir(a) => cmd::edit::names::mkdir(a),
        Command::Rm(a) => cmd::edit::names::rm(a),
        Command::Mv(a) => cmd::edit::names::mv(a),
        Command::Ln(a) => cmd::edit::names::ln(a),
        Command::Chmod(a) => cmd::edit::attrs::chmod(a),
        Command::Chown(a) => cmd::edit::attrs::chown(a),
        Command::Touch(a) => cmd::edit::attrs::touch(a),
        Command::Truncate(a) => cmd::edit::attrs::truncate(a),
        Command::Setfattr(a) => cmd::edit::xattr::setfattr(a),
        Command::Getfattr(a) => cmd::edit::xattr::getfattr(a),
        Command::Chattr(a) => cmd::edit::flags::chattr(a),
        Command::Lsattr(a) => cmd::edit::flags::lsattr(a),
        Command::Chproj(a) => cmd::edit::flags::chproj(a),
        Command::Lsproj(a) => cmd::edit::flags::lsproj(a),
        Command::Admin(a) => cmd::admin::run(a),
        Command::Metadump(a) => cmd::metadump::run(a),
        Command::Mdrestore(a) => cmd::mdrestore::run(a),
        Command::Grow(a) => cmd::grow::run(a),
        Command::Undo(a) => cmd::undo::run(a),
        Command::Manpages(a) => cmd::docs::manpages(a, Cli::command()),
        Command::Completions(a) => cmd::docs::completions(a, Cli::command()),
    };
    cmd::print_remote_stats();
    if undo_asked && r.is_ok() && !cmd::UNDO_MADE.load(std::sync::atomic::Ordering::Relaxed) {
        errln!("xfskit: nothing was written into the image: no undo file was made");
    }
    // Standard output that could not be written (not a closed pipe, which
    // ends the output quietly) is an I/O error, unless the command failed
    // on its own.
    let unwritten = cmd::out::finish();
    match r {
        Ok(code) => match unwritten {
            Some(e) => {
                errln!("xfskit: writing standard output: {e}");
                ExitCode::from(4)
            }
            None => code,
        },
        Err(e) => {
            errln!("xfskit: {}", cmd::message(&e));
            cmd::exit_code(&e)
        }
    }
}
