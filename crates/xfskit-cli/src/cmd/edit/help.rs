//! The long help (`--help`) of the editing commands.

/// What every editing command's help says about images, the journal and
/// paths.
macro_rules! common {
    () => {
        "\n\nIMAGE may be a bare XFS filesystem, a partitioned disk (MBR or GPT, raw or \
qcow2; the XFS partition is found by its superblock, or named with --partition N or \
--lv VG/LV, as `xfskit parts` lists them). No root, loop device or mount is needed.\n\n\
The edit is journaled: changes go to the filesystem's log first, and the log is left \
clean at the end. An edit interrupted part way (killed, power lost) leaves an image \
that the kernel, xfs_repair or the next xfskit command recovers, never a damaged one.\n\n\
Paths in the image are absolute or relative to its root. '*', '?' and '[...]' match \
names as the shell's globs do (quote them so that the shell leaves them alone; a name \
starting with '.' is matched only by a pattern starting with '.', '\\' quotes).\n\n\
Exit status: 0 on success; 1 if a path was not found, exists already or is of the \
wrong kind; 2 usage error; 3 unsupported filesystem or no XFS on the disk; 4 I/O \
error or no space left; 5 corrupt image. With several paths the others are still \
done; the highest status is returned."
    };
}

pub const MKDIR: &str = concat!(
    "Make directories in an XFS image, like mkdir(1). New directories get mode 755 \
(or -m) and owner 0:0 (or --owner); their times are now.",
    common!(),
    "\n\nExamples:\n  xfskit mkdir disk.qcow2 /srv/data\n  xfskit mkdir -p -m 700 disk.img /root/.ssh"
);

pub const RM: &str = concat!(
    "Remove files, symlinks and (with -r) directories from an XFS image, like rm(1). \
Blocks are freed at once; the root directory is never removed.",
    common!(),
    "\n\nExamples:\n  xfskit rm disk.img '/etc/*.rpmnew'\n  xfskit rm -rf disk.qcow2 /var/cache/dnf"
);

pub const MV: &str = concat!(
    "Rename or move entries within an XFS image, like mv(1). With one SOURCE, DEST is \
the new name, unless DEST is an existing directory: then the source moves into it. \
With several sources DEST must be a directory. An existing destination of the same \
kind is replaced (a directory only when empty).",
    common!(),
    "\n\nExamples:\n  xfskit mv disk.img /etc/motd /etc/motd.old\n  xfskit mv disk.img '/tmp/*.log' /var/log/"
);

pub const LN: &str = concat!(
    "Make a hard link (or with -s a symbolic link) in an XFS image, like ln(1). A \
symbolic link holds TARGET as given (it is not looked up); a hard link's TARGET is a \
path in the image and may not be a directory. When LINK is an existing directory the \
link is made in it under TARGET's last name.",
    common!(),
    "\n\nExamples:\n  xfskit ln -s disk.img /usr/lib/systemd/system/sshd.service \
/etc/systemd/system/multi-user.target.wants/\n  xfskit ln disk.img /bin/busybox /bin/sh"
);

pub const CHMOD: &str = concat!(
    "Change permission bits in an XFS image, like chmod(1): octal (644, 2755) or \
symbolic (u+x, go-w, a=rX, +t; clauses joined by commas). Symlinks are left alone. \
The change time becomes now.",
    common!(),
    "\n\nExamples:\n  xfskit chmod disk.img 600 /root/.ssh/authorized_keys\n  \
xfskit chmod -R go-w disk.img /srv"
);

pub const CHOWN: &str = concat!(
    "Change owner and group in an XFS image, like chown(1). Names are looked up in \
the image's own /etc/passwd and /etc/group, not the host's. Set-user-id and \
set-group-id bits of executables are cleared, as the kernel does.",
    common!(),
    "\n\nExamples:\n  xfskit chown disk.img 1000:1000 /home/alice\n  \
xfskit chown -R alice:users disk.qcow2 /home/alice"
);

pub const TOUCH: &str = concat!(
    "Set access and modification times in an XFS image, like touch(1); a missing \
file is created empty (mode 644, owner 0:0 or --owner) unless -c. Times given with \
-d or -t are UTC; -d takes @SECONDS[.FRACTION] (nanoseconds kept) or \
YYYY-MM-DD[ HH:MM[:SS[.FRACTION]]]; -r takes them from a file of the image.",
    common!(),
    "\n\nExamples:\n  xfskit touch disk.img /etc/cloud/cloud-init.disabled\n  \
xfskit touch -d @1700000000 disk.img '/etc/*.conf'"
);

pub const TRUNCATE: &str = concat!(
    "Set the size of regular files in an XFS image, like truncate(1): blocks past \
the new end are freed, growth is a hole. A missing file is created unless -c.",
    common!(),
    "\n\nExamples:\n  xfskit truncate -s 0 disk.img /var/log/messages\n  \
xfskit truncate -s +1G disk.img /var/lib/swapfile"
);

pub const SETFATTR: &str = concat!(
    "Set (-n NAME -v VALUE) or remove (-x NAME) an extended attribute in an XFS image, \
like setfattr(1). Names carry their namespace: user., trusted., security., or \
system.posix_acl_access / system.posix_acl_default (in the Linux binary ACL format). \
VALUE is text, \"quoted text\" with \\n, \\\\, \\\" and octal \\NNN escapes, 0x \
followed by hex digits, or 0s followed by base64.",
    common!(),
    "\n\nExamples:\n  xfskit setfattr -n security.selinux -v system_u:object_r:etc_t:s0 \
disk.img /etc/hosts\n  xfskit setfattr -x user.comment disk.img /srv/file"
);

pub const GETFATTR: &str = "Print extended attributes of files in an XFS image, in the \
format of getfattr(1): a '# file: PATH' line (the leading '/' removed unless \
--absolute-names), then one line per attribute, then an empty line. Without -d or -n \
only names are printed. -m takes a name prefix (a leading '^' and '\\.' are \
understood, so getfattr's usual patterns work) or '-' for every name; the default \
shows user. attributes. ACLs show as system.posix_acl_access and \
system.posix_acl_default in the Linux binary format.\n\n\
IMAGE may be a bare XFS filesystem or a partitioned disk (raw or qcow2), as for \
`xfskit ls`; it is only read. '*', '?' and '[...]' in paths match as globs.\n\n\
Exit status: 0 on success; 1 if a path or the attribute named by -n was not found; \
2 usage error; 3 unsupported; 4 I/O error; 5 corrupt image.\n\n\
Examples:\n  xfskit getfattr -d -m - disk.img /etc/shadow\n  \
xfskit getfattr -n security.selinux --only-values disk.img /etc/hosts";

pub const CP: &str = concat!(
    "Copy files and trees into an XFS image (SRC... IMAGE:DEST) or out of one \
(IMAGE:SRC... DEST), naming the image side as e2cp and scp do. IMAGE:PATH is \
recognised by IMAGE being an existing file; a host path containing ':' is taken as \
it is when no such file exists.\n\n\
As cp(1): with one SRC, DEST is the new name unless it is an existing directory, \
into which the source is copied under its own name; with several SRCs, DEST must be \
a directory. Directories need -r. Into an image an existing directory is merged \
into and an existing file replaced; out of an image a directory's destination must \
not exist or be empty.\n\n\
Into the image, without -a: permission bits are kept (set-id bits dropped), the \
owner is 0:0 (or --owner), all times are the time of the copy, symlinks named as \
SRC are followed, and xattrs are not copied. With -a (archive, implies -r): \
permission and set-id bits, numeric owners, nanosecond access, modification and \
change times and user, trusted and security xattrs and POSIX ACLs are kept, and \
symlinks are copied as symlinks. Either way, within a copied tree: symlinks stay \
symlinks, files linked more than once become hard links of one inode, holes stay \
holes (SEEK_DATA), and device nodes, fifos and sockets are made as they are.\n\n\
Out of the image, copies keep contents (holes stay holes), permission bits, \
symlinks and hard links; -a also keeps nanosecond times, xattrs and (when run as \
root) owners, as `xfskit extract` does. Globs work in the image paths. What the \
destination refuses (an xattr too big for it, a device node without privilege, a name \
it cannot hold, no space for one file) is reported as `xfskit cp: PATH: what: why`, \
the rest is still copied, a summary line counts it, and the exit status is 6 \
(\"copied with some entries incomplete\") unless something worse (1 to 5) happened; \
--strict stops at the first such error instead.\n\n\
The whole copy is one batch: the journal is written as transactions fill it and \
forced once at the end, not per file. A progress line is shown when standard error \
is a terminal.",
    common!()
);

pub const CP_EXAMPLES: &str = "Examples:
  xfskit cp authorized_keys disk.qcow2:/root/.ssh/
  xfskit cp -a rootfs-overlay/etc disk.img:/
  xfskit cp -r --partition 2 site/ disk.img:/srv/www
  xfskit cp disk.qcow2:/etc/os-release .
  xfskit cp -r disk.img:'/var/log/*.log' logs/";

/// What the flag commands' help says about the flags.
macro_rules! flag_letters {
    () => {
        "\n\nThe flags, as xfs_io names them (`lsattr -v` prints the long names): \
r realtime (a file's data in the realtime section; only on an empty file of a \
filesystem with one), p prealloc (the file has preallocated extents; not settable), \
i immutable, a append-only, s sync, A no-atime, d no-dump, t rt-inherit (new files \
in the directory are realtime), P proj-inherit (new entries take the directory's \
project id), n nosymlinks (no symlinks made in the directory), e extsize (the file \
observes its extent size hint), E extsz-inherit (new entries take the directory's \
hint), f no-defrag, S filestream (the filestreams allocator for the directory), x dax, \
C cowextsize (the file observes its copy-on-write hint), X has-xattr (not settable). \
A flag the inode's type cannot take is left off, as kernel XFS leaves it (P on a \
file, e on a directory); e, E and C need a hint already set (`xfs_io -c extsize` \
on a mount), or they are dropped."
    };
}

pub const CHATTR: &str = concat!(
    "Change the XFS inode flags of files in an XFS image, as `xfs_io -c chattr` does \
on a mounted filesystem: +LETTERS sets flags, -LETTERS clears them (+i-d does both). \
Each change is checked as the kernel's FS_IOC_FSSETXATTR checks it, and stamps the \
change time. -R also changes everything under the directories named (symlinks and \
device nodes included, as xfs_io 7.2 does), -D only the directories under them.",
    flag_letters!(),
    common!(),
    "\n\nExamples:\n  xfskit chattr disk.img +i /etc/resolv.conf\n  \
xfskit chattr -R disk.img +d /var/cache\n  xfskit chattr disk.img -ia /var/log/audit.log"
);

pub const LSATTR: &str = concat!(
    "List the XFS inode flags of files in an XFS image, in the format of `xfs_io -c \
lsattr`: one letter per flag in the order rpiasAdtPneEfSxCX ('-' where unset), then \
the path. -v prints the long names in brackets instead, -a appends every flag letter \
after a '/', --json prints one object per line with the letters, the names, the \
project id and the extent size hints in bytes. -R lists everything under the \
directories named, -D the directories under them; each directory comes after what \
it holds, entries in directory order, as xfs_io's walk gives them.",
    flag_letters!(),
    "\n\nIMAGE may be a bare XFS filesystem or a partitioned disk (raw or qcow2), as for \
`xfskit ls`; it is only read. '*', '?' and '[...]' in paths match as globs.\n\n\
Exit status: 0 on success; 1 if a path was not found; 2 usage error; 3 unsupported; \
4 I/O error; 5 corrupt image.\n\n\
Examples:\n  xfskit lsattr -R disk.img /etc\n  xfskit lsattr --json disk.img / | jq -r .flags"
);

pub const CHPROJ: &str = concat!(
    "Set the project id of files in an XFS image, as `xfs_io -c chproj` does on a \
mounted filesystem; with --inherit directories also get the proj-inherit flag (P), \
so that what is made in them later takes the id: together, `chproj -R --inherit ID \
IMAGE DIR` sets up a directory tree for a project quota as `xfs_quota -x -c \
'project -s'` does. Ids above 65535 need a filesystem with 32-bit project ids \
(every v5 filesystem and v4 ones with projid32bit). -R changes everything under the \
directories named, -D only the directories under them. Each change stamps the \
change time. Quota usage recorded in the image is not updated, as for every offline \
edit today.",
    common!(),
    "\n\nExamples:\n  xfskit chproj -R --inherit disk.img 42 /srv/projects/web\n  \
xfskit lsproj -R disk.img /srv/projects"
);

pub const LSPROJ: &str = concat!(
    "Print the project id of files in an XFS image, as `xfs_io -c lsproj` does: \
'projid = N' for one path, '[N] PATH' for each of several and with -R (everything \
under the directories named) or -D (the directories under them), each directory \
after what it holds.",
    "\n\nIMAGE may be a bare XFS filesystem or a partitioned disk (raw or qcow2), as for \
`xfskit ls`; it is only read. '*', '?' and '[...]' in paths match as globs.\n\n\
Exit status: 0 on success; 1 if a path was not found; 2 usage error; 3 unsupported; \
4 I/O error; 5 corrupt image.\n\n\
Examples:\n  xfskit lsproj disk.img /srv/projects/web\n  xfskit lsproj -D disk.img /srv"
);
