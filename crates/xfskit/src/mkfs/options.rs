//! Command-line options of `xfskit mkfs`, parsed with the syntax of mkfs.xfs.
//!
//! Options are grouped like mkfs.xfs (`-b`, `-d`, `-i`, `-l`, `-m`, `-n`, `-s`);
//! each group takes comma-separated `name=value` sub-options and may be
//! repeated, but a sub-option given twice is an error, as in mkfs.xfs.
//! Size values that depend on the final block or sector size (`b` and `s`
//! suffixes) are kept as text and converted by the geometry code.

use std::collections::HashSet;

/// Errors from option parsing and geometry computation.  The message text
/// follows mkfs.xfs where mkfs.xfs has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MkfsError {
    /// A malformed, out-of-range or conflicting command-line option.
    #[error("{0}")]
    BadOption(String),
    /// The requested geometry cannot be built (sizes, alignment, limits).
    #[error("{0}")]
    Geometry(String),
    /// A valid mkfs.xfs request that xfskit does not implement (V4, zoned
    /// realtime sections).
    #[error("unsupported by xfskit: {0}")]
    Unsupported(String),
    /// The target holds a filesystem or partition table and `-f` was not given.
    #[error("{0}")]
    Exists(String),
    /// The target cannot be opened, read or written.
    #[error("{0}")]
    Io(String),
}

/// Every mkfs.xfs option xfskit understands.  `None` means "not given on the
/// command line"; mkfs chooses defaults differently when a value was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MkfsOptions {
    /// `-b size=`: filesystem block size in bytes.
    pub block_size: Option<u32>,
    /// `-s size=` (or `-d sectsize=`): sector size in bytes.
    pub sector_size: Option<u32>,
    /// `-d size=`: data section size, as typed (may use `b`/`s` suffixes).
    pub data_size: Option<String>,
    /// `-d agcount=`.
    pub agcount: Option<u64>,
    /// `-d agsize=`, as typed.
    pub agsize: Option<String>,
    /// `-d su=`: stripe unit in bytes, as typed.
    pub data_su: Option<String>,
    /// `-d sw=`: stripe width as a multiple of the stripe unit.
    pub data_sw: Option<u32>,
    /// `-d sunit=`: stripe unit in 512-byte units.
    pub data_sunit: Option<u32>,
    /// `-d swidth=`: stripe width in 512-byte units.
    pub data_swidth: Option<u32>,
    /// `-d noalign`: ignore device stripe geometry.
    pub data_noalign: bool,
    /// `-d file=`: the target is a regular file.
    pub data_file: bool,
    /// `-d name=` or the trailing device argument.
    pub data_name: Option<String>,
    /// `-i size=`: inode size in bytes.
    pub inode_size: Option<u32>,
    /// `-i perblock=`: inodes per block.
    pub inode_perblock: Option<u32>,
    /// `-i maxpct=`: maximum percentage of space for inodes.
    pub imaxpct: Option<u32>,
    /// `-i sparse=`: sparse inode chunks.
    pub sparse: Option<bool>,
    /// `-i nrext64=`: large extent counters.
    pub nrext64: Option<bool>,
    /// `-l size=`: log size, as typed.
    pub log_size: Option<String>,
    /// `-l logdev=` (or `-l name=`): the external log device, a file or
    /// block device that must exist.
    pub log_dev: Option<String>,
    /// `-l file=`: the log device is a regular file.
    pub log_file: bool,
    /// `-l internal=0`: no internal log (then `-l logdev=` is required).
    pub log_not_internal: bool,
    /// `-l sectsize=` (also set by `-s size=`, as in mkfs.xfs): the log's
    /// sector size in bytes; only an external log may differ from the
    /// data sector size.
    pub log_sector_size: Option<u32>,
    /// `-l su=`: log stripe unit in bytes, as typed.
    pub log_su: Option<String>,
    /// `-l sunit=`: log stripe unit in 512-byte units.
    pub log_sunit: Option<u32>,
    /// `-n size=`: directory block size, as typed.
    pub dir_block_size: Option<String>,
    /// `-m crc=`: only 1 (V5) is supported by xfskit.
    pub crc: Option<bool>,
    /// `-m finobt=`.
    pub finobt: Option<bool>,
    /// `-m rmapbt=`.
    pub rmapbt: Option<bool>,
    /// `-m reflink=`.
    pub reflink: Option<bool>,
    /// `-m bigtime=`.
    pub bigtime: Option<bool>,
    /// `-m inobtcount=`.
    pub inobtcount: Option<bool>,
    /// `-m uuid=`.
    pub uuid: Option<[u8; 16]>,
    /// `-n parent=`: parent pointers.
    pub parent: Option<bool>,
    /// `-i exchange=`: file range exchange.
    pub exchange: Option<bool>,
    /// `-m metadir=`: a metadata directory tree (incompat METADIR).
    pub metadir: Option<bool>,
    /// `-d concurrency=`: AGs for this many writer threads (0: the
    /// classic AG geometry); `nr_cpus` or 1 is resolved to the processors
    /// online.
    pub data_concurrency: Option<u64>,
    /// `-l concurrency=`: a log for this many writer threads (0: the
    /// classic log size).
    pub log_concurrency: Option<u64>,
    /// `-l agnum=`: the AG that holds the internal log (else the middle one).
    pub log_agnum: Option<u64>,
    /// `-m autofsck=`: the online fsck policy mkfs records on the root
    /// directory (the trusted attribute `xfs:autofsck`).
    pub autofsck: Option<super::features::Autofsck>,
    /// `-m uquota`, `gquota`, `pquota` (accounting and enforcement),
    /// `uqnoenforce`, `gqnoenforce`, `pqnoenforce` (accounting only): the
    /// superblock's persistent quota flags (`sb_qflags`).
    pub qflags: u16,
    /// `-r rtdev=`: the realtime device (a file or block device).
    pub rt_dev: Option<String>,
    /// `-r size=`: realtime section size, as typed.
    pub rt_size: Option<String>,
    /// `-r extsize=`: realtime extent size in bytes, as typed.
    pub rt_extsize: Option<String>,
    /// `-r rgcount=`: realtime groups (metadir filesystems).
    pub rt_rgcount: Option<u64>,
    /// `-r rgsize=`: realtime group size in bytes, as typed.
    pub rt_rgsize: Option<String>,
    /// `--defaults VERSION`: the feature defaults of that xfsprogs release.
    pub defaults: Option<super::profiles::Defaults>,
    /// `-c options=FILE`: a mkfs.xfs config file (its values apply where
    /// the command line gives none).
    pub config_file: Option<String>,
    /// `-L`: filesystem label (at most 12 bytes).
    pub label: Option<String>,
    /// `-K`: do not discard blocks.
    pub no_discard: bool,
    /// `-N`: print the geometry only, write nothing.
    pub dry_run: bool,
    /// `-f`: overwrite an existing filesystem.
    pub force: bool,
    /// `-q`: quiet.
    pub quiet: bool,
    /// Make filesystems mkfs.xfs calls unsupported: under 300 MB, with one
    /// AG, or with a log under 64 MiB (down to the minimum the log
    /// reservations allow). mkfs.xfs allows them when fstests' environment
    /// (`TEST_DIR`, `TEST_DEV` and `QA_CHECK_FS`) is set, and
    /// [`parse_mkfs_args`] reads the same variables.
    pub unsupported: bool,
}

fn bad(msg: String) -> MkfsError {
    MkfsError::BadOption(msg)
}

/// C `strtoll(s, &end, 0)`: returns the value (saturated) and the unparsed rest,
/// or `None` when no digits were found.
fn strtoll(s: &str) -> Option<(i64, &str)> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if (t.starts_with("0x") || t.starts_with("0X"))
        && t[2..].chars().next().is_some_and(|c| c.is_ascii_hexdigit())
    {
        (16, &t[2..])
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    let len = digits.chars().take_while(|c| c.is_digit(radix)).count();
    if len == 0 {
        return None;
    }
    let mut v: i128 = 0;
    for c in digits[..len].chars() {
        v = (v * radix as i128 + c.to_digit(radix).unwrap_or(0) as i128).min(1 << 64);
    }
    let v = if neg { -v } else { v };
    let v = v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    Some((v, &digits[len..]))
}

/// Convert a size with an optional unit suffix like mkfs.xfs does: `k m g t p e`
/// are binary multiples, `b` is the block size and `s` the sector size (an error
/// when that size is not known yet, given as 0).  Overflow wraps as in mkfs.xfs.
pub fn convert_size(text: &str, block_size: u64, sector_size: u64) -> Option<i64> {
    let (v, rest) = strtoll(text)?;
    let mut chars = rest.chars();
    let Some(c) = chars.next() else {
        return Some(v);
    };
    if chars.next().is_some() {
        return None;
    }
    let shift = |n: u32| Some(v.wrapping_shl(n));
    match c.to_ascii_lowercase() {
        'b' if block_size != 0 => Some(v.wrapping_mul(block_size as i64)),
        's' if sector_size != 0 => Some(v.wrapping_mul(sector_size as i64)),
        'k' => shift(10),
        'm' => shift(20),
        'g' => shift(30),
        't' => shift(40),
        'p' => shift(50),
        'e' => shift(60),
        _ => None,
    }
}

/// Range rules of one numeric sub-option.
pub(crate) struct Rule<'a> {
    pub group: char,
    pub name: &'a str,
    pub min: i64,
    pub max: i64,
    pub pow2: bool,
    pub suffixes: bool,
}

impl Rule<'_> {
    fn reject(&self, value: &str, why: &str) -> MkfsError {
        bad(format!(
            "Invalid value {value} for -{} {} option. {why}",
            self.group, self.name
        ))
    }

    /// Parse and range-check `value` with mkfs.xfs's rules and messages.
    pub(crate) fn number(&self, value: &str, bsize: u64, ssize: u64) -> Result<i64, MkfsError> {
        let v = if self.suffixes {
            convert_size(value, bsize, ssize)
                .ok_or_else(|| self.reject(value, "Not a valid value or illegal suffix"))?
        } else {
            let (v, rest) = strtoll(value)
                .ok_or_else(|| self.reject(value, "Value not recognized as number."))?;
            if !rest.is_empty() {
                return Err(self.reject(value, "Unit suffixes are not allowed."));
            }
            v
        };
        if v < self.min {
            return Err(self.reject(value, "Value is too small."));
        }
        if v > self.max {
            return Err(self.reject(value, "Value is too large."));
        }
        if self.pow2 && (v <= 0 || v & (v - 1) != 0) {
            return Err(self.reject(value, "Value must be a power of 2."));
        }
        Ok(v)
    }
}

const fn rule(group: char, name: &str, min: i64, max: i64, pow2: bool, suffixes: bool) -> Rule<'_> {
    Rule {
        group,
        name,
        min,
        max,
        pow2,
        suffixes,
    }
}

const UINT_MAX: i64 = u32::MAX as i64;
/// Rule for `-d size=`.
pub(crate) const D_SIZE: Rule<'static> = rule('d', "size", 1 << 24, i64::MAX, false, true);
/// Rule for `-d agsize=`.
pub(crate) const D_AGSIZE: Rule<'static> = rule('d', "agsize", 1 << 24, 1 << 40, false, true);
/// Rule for `-d su=`.
pub(crate) const D_SU: Rule<'static> = rule('d', "su", 0, UINT_MAX, false, true);
/// Rule for `-l size=`.
pub(crate) const L_SIZE: Rule<'static> =
    rule('l', "size", 2 << 20, (2 << 30) - (10 << 20), false, true);
/// Rule for `-l su=`.
pub(crate) const L_SU: Rule<'static> = rule('l', "su", 512, 256 * 1024, false, true);
/// Rule for `-n size=`.
pub(crate) const N_SIZE: Rule<'static> = rule('n', "size", 4096, 65536, true, true);

fn flag(group: char, name: &str, value: &str) -> Result<bool, MkfsError> {
    if value.is_empty() {
        return Ok(true);
    }
    Ok(rule(group, name, 0, 1, false, false).number(value, 0, 0)? == 1)
}

fn parse_uuid(value: &str) -> Result<[u8; 16], MkfsError> {
    let hex: String = value.chars().filter(|&c| c != '-').collect();
    let well_formed = value.len() == 36
        && value
            .char_indices()
            .all(|(i, c)| matches!(i, 8 | 13 | 18 | 23) == (c == '-'));
    if !well_formed || hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad(format!("Invalid value {value} for -m uuid option")));
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    Ok(out)
}

/// Pairs of sub-options that mkfs.xfs refuses to combine.
const CONFLICTS: &[(char, &str, &str)] = &[
    ('d', "agcount", "agsize"),
    ('d', "agcount", "concurrency"),
    ('d', "agsize", "concurrency"),
    ('l', "size", "concurrency"),
    ('d', "su", "sunit"),
    ('d', "su", "swidth"),
    ('d', "sw", "sunit"),
    ('d', "sw", "swidth"),
    ('d', "noalign", "su"),
    ('d', "noalign", "sw"),
    ('d', "noalign", "sunit"),
    ('d', "noalign", "swidth"),
    ('i', "size", "perblock"),
    ('l', "su", "sunit"),
    ('l', "agnum", "logdev"),
    ('l', "agnum", "name"),
    ('l', "logdev", "name"),
    ('l', "logdev", "internal"),
    ('l', "name", "internal"),
    ('l', "logdev", "concurrency"),
    ('l', "internal", "file"),
    ('l', "internal", "sectsize"),
    ('l', "file", "concurrency"),
    ('s', "size", "sectsize"),
];

struct Parser {
    opts: MkfsOptions,
    seen: HashSet<(char, String)>,
}

impl Parser {
    fn sub(&mut self, group: char, name: &str, value: &str) -> Result<(), MkfsError> {
        // `-s size` and `-d sectsize` set the same thing; mkfs tracks them apart.
        // As mkfs.xfs 7.2: `-m autofsck` may be given again, the last wins.
        if !self.seen.insert((group, name.to_string())) && (group, name) != ('m', "autofsck") {
            return Err(bad(format!("-{group} {name} option respecified")));
        }
        for &(g, a, b) in CONFLICTS {
            let other = if name == a {
                b
            } else if name == b {
                a
            } else {
                continue;
            };
            if g == group && self.seen.contains(&(group, other.to_string())) {
                return Err(bad(format!(
                    "Cannot specify both -{group} {other} and -{group} {name}"
                )));
            }
        }
        let need = |v: &str| {
            if v.is_empty() {
                Err(bad(format!("-{group} {name} option requires a value")))
            } else {
                Ok(v.to_string())
            }
        };
        let num = |min: i64, max: i64, pow2: bool, suffixes: bool| {
            if value.is_empty() {
                return Err(bad(format!("-{group} {name} option requires a value")));
            }
            rule(group, name, min, max, pow2, suffixes).number(value, 0, 0)
        };
        let o = &mut self.opts;
        match (group, name) {
            ('b', "size") => o.block_size = Some(num(512, 65536, true, true)? as u32),
            ('s', "size") | ('s', "sectsize") | ('d', "sectsize") => {
                o.sector_size = Some(num(512, 32768, true, true)? as u32);
                // As mkfs.xfs: -s sets the log's sector size too, -d not.
                if group == 's' {
                    o.log_sector_size = o.sector_size;
                }
            }
            ('l', "sectsize") => o.log_sector_size = Some(num(512, 32768, true, true)? as u32),
            ('l', "logdev") | ('l', "name") => o.log_dev = Some(need(value)?),
            ('l', "file") => o.log_file = flag(group, "file", value)?,
            ('d', "size") => o.data_size = Some(need(value)?),
            ('d', "agcount") => o.agcount = Some(num(1, UINT_MAX - 1, false, false)? as u64),
            ('d', "concurrency") | ('l', "concurrency") => {
                // As mkfs.xfs: `nr_cpus`, 1 or the name alone ask for one
                // per online processor; 0 turns the scheme off.
                let n = match value {
                    "" | "nr_cpus" => 1,
                    _ => rule(group, name, 0, i64::from(i32::MAX), false, false)
                        .number(value, 0, 0)? as u64,
                };
                let n = if n == 1 { online_cpus() } else { n };
                if group == 'd' {
                    o.data_concurrency = Some(n);
                } else {
                    o.log_concurrency = Some(n);
                }
            }
            ('d', "agsize") => o.agsize = Some(need(value)?),
            ('d', "su") => o.data_su = Some(need(value)?),
            ('d', "sw") => o.data_sw = Some(num(0, UINT_MAX, false, false)? as u32),
            ('d', "sunit") => o.data_sunit = Some(num(0, UINT_MAX, false, false)? as u32),
            ('d', "swidth") => o.data_swidth = Some(num(0, UINT_MAX, false, false)? as u32),
            ('d', "noalign") => o.data_noalign = flag(group, "noalign", value)?,
            ('d', "file") => o.data_file = flag(group, "file", value)?,
            ('d', "name") => o.data_name = Some(need(value)?),
            ('i', "size") => o.inode_size = Some(num(256, 2048, true, false)? as u32),
            ('i', "perblock") => o.inode_perblock = Some(num(2, 256, true, false)? as u32),
            ('i', "maxpct") => o.imaxpct = Some(num(0, 100, false, false)? as u32),
            ('i', "sparse") => o.sparse = Some(flag(group, "sparse", value)?),
            ('i', "nrext64") => o.nrext64 = Some(flag(group, "nrext64", value)?),
            ('i', "exchange") => o.exchange = Some(flag(group, "exchange", value)?),
            ('n', "parent") => o.parent = Some(flag(group, "parent", value)?),
            ('c', "options") => o.config_file = Some(need(value)?),
            ('m', "metadir") => o.metadir = Some(flag(group, "metadir", value)?),
            (
                'm',
                q
                @ ("uquota" | "gquota" | "pquota" | "uqnoenforce" | "gqnoenforce" | "pqnoenforce"),
            ) => {
                // As mkfs.xfs 7.2: accounting, with enforcement unless
                // "noenforce"; a 0 adds nothing.
                let bits = match q {
                    "uquota" => 0x0001 | 0x0002,
                    "gquota" => 0x0040 | 0x0080,
                    "pquota" => 0x0008 | 0x0200,
                    "uqnoenforce" => 0x0001,
                    "gqnoenforce" => 0x0040,
                    _ => 0x0008,
                };
                if flag(group, q, value)? {
                    o.qflags |= bits;
                }
            }
            ('r', "rtdev") => o.rt_dev = Some(need(value)?),
            ('r', "size") => o.rt_size = Some(need(value)?),
            ('r', "extsize") => o.rt_extsize = Some(need(value)?),
            ('r', "file") | ('r', "noalign") => {
                flag(group, name, value)?;
            }
            ('r', "rgcount") => {
                if o.rt_rgsize.is_some() {
                    return Err(bad("-r rgcount and rgsize are mutually exclusive".into()));
                }
                o.rt_rgcount = Some(num(1, UINT_MAX, false, false)? as u64)
            }
            ('r', "rgsize") => {
                if o.rt_rgcount.is_some() {
                    return Err(bad("-r rgcount and rgsize are mutually exclusive".into()));
                }
                o.rt_rgsize = Some(need(value)?)
            }
            ('r', "zoned") | ('r', "start") | ('r', "reserved") => {
                if name != "zoned" || flag(group, name, value)? {
                    return Err(MkfsError::Unsupported(format!(
                        "zoned realtime sections (-r {name}=)"
                    )));
                }
            }
            ('m', "autofsck") => {
                o.autofsck =
                    Some(super::features::Autofsck::parse(value).ok_or_else(|| {
                        bad(format!("Invalid value {value} for -m autofsck option"))
                    })?)
            }
            ('i', "align") | ('i', "projid32bit") | ('l', "lazy-count") | ('n', "ftype") => {
                if !flag(group, "option", value)? {
                    return Err(MkfsError::Unsupported(format!(
                        "-{group} {name}=0 (V5 requires it)"
                    )));
                }
            }
            ('i', "attr") => {
                if num(0, 2, false, false)? != 2 {
                    return Err(MkfsError::Unsupported("-i attr other than 2".into()));
                }
            }
            ('l', "size") => o.log_size = Some(need(value)?),
            ('l', "agnum") => o.log_agnum = Some(num(0, UINT_MAX, false, false)? as u64),
            ('l', "su") => o.log_su = Some(need(value)?),
            ('l', "sunit") => o.log_sunit = Some(num(1, 512, false, false)? as u32),
            ('l', "internal") => o.log_not_internal = !flag(group, "internal", value)?,
            ('l', "version") => {
                if num(1, 2, false, false)? != 2 {
                    return Err(bad(
                        "V2 logs always enabled for CRC enabled filesystems".into()
                    ));
                }
            }
            ('n', "size") => o.dir_block_size = Some(need(value)?),
            ('n', "version") => {
                num(2, 2, false, false)?;
            }
            ('m', "crc") => {
                o.crc = Some(flag(group, "crc", value)?);
                if o.crc == Some(false) {
                    return Err(MkfsError::Unsupported("V4 filesystems (-m crc=0)".into()));
                }
            }
            ('m', "finobt") => o.finobt = Some(flag(group, "finobt", value)?),
            ('m', "rmapbt") => o.rmapbt = Some(flag(group, "rmapbt", value)?),
            ('m', "reflink") => o.reflink = Some(flag(group, "reflink", value)?),
            ('m', "bigtime") => o.bigtime = Some(flag(group, "bigtime", value)?),
            ('m', "inobtcount") => o.inobtcount = Some(flag(group, "inobtcount", value)?),
            ('m', "uuid") => o.uuid = Some(parse_uuid(&need(value)?)?),
            _ => return Err(bad(format!("unknown option -{group} {name}"))),
        }
        Ok(())
    }

    fn group(&mut self, group: char, text: &str) -> Result<(), MkfsError> {
        for item in text.split(',') {
            let (name, value) = item.split_once('=').unwrap_or((item, ""));
            self.sub(group, name, value)?;
        }
        Ok(())
    }
}

/// Parse mkfs.xfs-style arguments (without the program name), for example
/// `["-d", "agcount=4,size=1g", "-m", "rmapbt=1", "-N", "/dev/sdb"]`.
/// Flags may be clustered (`-fN`) and option values attached (`-dsize=1g`).
pub fn parse_mkfs_args(args: &[String]) -> Result<MkfsOptions, MkfsError> {
    let mut p = Parser {
        opts: MkfsOptions::default(),
        seen: HashSet::new(),
    };
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        if !arg.starts_with('-') || arg.len() < 2 {
            positional.push(arg.clone());
            continue;
        }
        let mut rest = &arg[1..];
        while let Some(c) = rest.chars().next() {
            rest = &rest[c.len_utf8()..];
            match c {
                'f' | 'C' => p.opts.force = true,
                'N' => p.opts.dry_run = true,
                'K' => p.opts.no_discard = true,
                'q' => p.opts.quiet = true,
                '-' => {
                    // The one long option: --defaults VERSION.
                    let (name, attached) = match rest.split_once('=') {
                        Some((n, v)) => (n, Some(v.to_string())),
                        None => (rest, None),
                    };
                    if name != "defaults" {
                        return Err(bad(format!("unrecognized option '--{rest}'")));
                    }
                    let value = match attached {
                        Some(v) => v,
                        None if i < args.len() => {
                            i += 1;
                            args[i - 1].clone()
                        }
                        None => return Err(bad("option '--defaults' requires an argument".into())),
                    };
                    p.opts.defaults = Some(super::profiles::Defaults::parse(&value)?);
                    rest = "";
                }
                'b' | 'c' | 'd' | 'i' | 'l' | 'L' | 'm' | 'n' | 'r' | 's' => {
                    let value = if !rest.is_empty() {
                        rest.to_string()
                    } else if i < args.len() {
                        i += 1;
                        args[i - 1].clone()
                    } else {
                        return Err(bad(format!("option requires an argument -- '{c}'")));
                    };
                    if c == 'L' {
                        if value.len() > 12 {
                            return Err(bad(format!("Invalid value {value} for -L option")));
                        }
                        p.opts.label = Some(value);
                    } else {
                        p.group(c, &value)?;
                    }
                    rest = "";
                }
                _ => return Err(bad(format!("invalid option -- '{c}'"))),
            }
        }
    }
    match positional.len() {
        0 => {}
        1 => {
            if p.opts.data_name.is_some() {
                return Err(bad("-d name option respecified".into()));
            }
            p.opts.data_name = positional.pop();
        }
        _ => return Err(bad("extra arguments".into())),
    }
    // As mkfs.xfs: fstests makes tiny filesystems on purpose.
    p.opts.unsupported = ["TEST_DIR", "TEST_DEV", "QA_CHECK_FS"]
        .iter()
        .all(|v| std::env::var_os(v).is_some());
    if let Some(path) = p.opts.config_file.clone() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| bad(format!("cannot read config file {path}: {e}")))?;
        for (group, name, value) in parse_config(&path, &text)? {
            // The command line wins over the file, but for autofsck, which
            // mkfs.xfs 7.2 takes from the file last.
            if !p.seen.contains(&(group, name.clone()))
                || (group, name.as_str()) == ('m', "autofsck")
            {
                p.sub(group, &name, &value)?;
            }
        }
    }
    let o = &p.opts;
    if o.log_file && (o.log_dev.is_none() || o.log_size.is_none()) {
        return Err(bad(
            "if -l file then -l name and -l size are required".into()
        ));
    }
    if o.log_not_internal && o.log_dev.is_none() {
        return Err(bad("No log device name specified".into()));
    }
    Ok(p.opts)
}

/// The sub-options of a mkfs.xfs config file: `[section]` lines (data,
/// inode, log, metadata, naming, realtime, sector, block) and `name=value`
/// lines; `#` starts a comment.
fn parse_config(path: &str, text: &str) -> Result<Vec<(char, String, String)>, MkfsError> {
    let mut group = None;
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{path}:{}", n + 1);
        if let Some(sec) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            group = Some(match sec.trim() {
                "block" => 'b',
                "data" => 'd',
                "inode" => 'i',
                "log" => 'l',
                "metadata" => 'm',
                "naming" => 'n',
                "realtime" => 'r',
                "sector" => 's',
                other => return Err(bad(format!("{}: unknown section [{other}]", at()))),
            });
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(bad(format!(
                "{}: expected name=value, found {line:?}",
                at()
            )));
        };
        let Some(g) = group else {
            return Err(bad(format!("{}: {line:?} before any [section]", at())));
        };
        out.push((g, name.trim().to_string(), value.trim().to_string()));
    }
    Ok(out)
}

/// Processors online, as mkfs.xfs counts them for `concurrency=nr_cpus`
/// (`sysconf(_SC_NPROCESSORS_ONLN)`, which reads this list); 0 when it
/// cannot be read, which turns the scheme off as mkfs.xfs does.
pub(crate) fn online_cpus() -> u64 {
    let Ok(list) = std::fs::read_to_string("/sys/devices/system/cpu/online") else {
        return std::thread::available_parallelism().map_or(0, |n| n.get() as u64);
    };
    list.trim()
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => u64::from(r.parse::<u64>().is_ok()),
        })
        .sum()
}
