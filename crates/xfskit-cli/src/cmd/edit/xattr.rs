//! `xfskit setfattr` and `xfskit getfattr`: extended attributes in an
//! image, with the options and output of the attr package's tools.

use super::{expand, open_rw, parse, Outcome};
use crate::cmd::DiskArgs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::attr::acl;
use xfskit::inode::Inode;
use xfskit::{Error, Fs};

/// Arguments of `xfskit setfattr`.
#[derive(clap::Args)]
#[command(long_about = super::help::SETFATTR)]
pub struct SetArgs {
    /// Attribute to set (with its namespace: user.x, trusted.x, security.x,
    /// system.posix_acl_access, system.posix_acl_default).
    #[arg(
        short = 'n',
        long = "name",
        value_name = "NAME",
        conflicts_with = "remove"
    )]
    pub name: Option<String>,
    /// Its value: text, "quoted text" with escapes, 0x hex or 0s base64 (default empty).
    #[arg(
        short = 'v',
        long = "value",
        value_name = "VALUE",
        allow_hyphen_values = true
    )]
    pub value: Option<String>,
    /// Attribute to remove.
    #[arg(short = 'x', long = "remove", value_name = "NAME")]
    pub remove: Option<String>,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit setfattr`.
pub fn setfattr(a: SetArgs) -> Result<ExitCode, Error> {
    if a.name.is_none() && a.remove.is_none() {
        return Err(Error::Invalid("give -n NAME [-v VALUE] or -x NAME".into()));
    }
    let value = parse::xattr_value(a.value.as_deref().unwrap_or(""))?;
    let fs = open_rw(&a.image, &a.disk)?;
    let mut out = Outcome::new("setfattr");
    for pat in &a.paths {
        let paths = match expand(&fs, pat) {
            Ok(p) => p,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            out.run(&p, || {
                let ip = fs.lookup_path(p.as_bytes())?;
                match (&a.name, &a.remove) {
                    (Some(n), _) => fs.set_xattr(ip.ino, n.as_bytes(), &value),
                    (None, Some(n)) => fs.remove_xattr(ip.ino, n.as_bytes()).map_err(|e| match e {
                        Error::NotFound(_) => Error::NoAttr(n.clone()),
                        e => e,
                    }),
                    (None, None) => Ok(()),
                }
            });
        }
    }
    out.finish(&fs)
}

/// Arguments of `xfskit getfattr`.
#[derive(clap::Args)]
#[command(long_about = super::help::GETFATTR)]
pub struct GetArgs {
    /// Print only this attribute.
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    pub name: Option<String>,
    /// Print the values of all attributes whose names match -m.
    #[arg(short = 'd', long = "dump")]
    pub dump: bool,
    /// Names to show: a prefix such as "user." or "^security\\.", or "-" for all
    /// (default "^user\\.").
    #[arg(
        short = 'm',
        long = "match",
        value_name = "PATTERN",
        allow_hyphen_values = true
    )]
    pub pattern: Option<String>,
    /// Value encoding: text, hex or base64 (default: text when printable, else base64).
    #[arg(short = 'e', long = "encoding", value_name = "EN")]
    pub encoding: Option<String>,
    /// Print the value alone, as raw bytes.
    #[arg(long = "only-values")]
    pub only_values: bool,
    /// Keep the leading '/' of paths in the output.
    #[arg(long = "absolute-names")]
    pub absolute: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Every xattr of `ip` under its Linux name, ACLs in the Linux format.
fn all_xattrs(fs: &Fs, ip: &Inode) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let mut v = Vec::new();
    for x in xfskit::attr::list(fs, ip)? {
        let (name, value) = match acl::linux_name(x.ns, &x.name) {
            Some(n) => (n.to_vec(), acl::to_linux(ip.ino.0, &x.value)?),
            None => (x.full_name(), x.value),
        };
        v.push((String::from_utf8_lossy(&name).into_owned(), value));
    }
    v.sort();
    Ok(v)
}

/// `value` as getfattr prints it after `name=`.
fn encode(value: &[u8], enc: Option<&str>) -> Result<String, Error> {
    let text = |v: &[u8]| {
        let mut s = String::from("\"");
        for &b in v {
            match b {
                b'"' => s.push_str("\\\""),
                b'\\' => s.push_str("\\\\"),
                0x20..=0x7e => s.push(b as char),
                _ => s.push_str(&format!("\\{b:03o}")),
            }
        }
        s.push('"');
        s
    };
    Ok(match enc {
        Some("text") => text(value),
        Some("hex") => format!(
            "0x{}",
            value.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        Some("base64") => format!("0s{}", parse::base64_encode(value)),
        Some(e) => {
            return Err(Error::Invalid(format!(
                "unknown encoding {e:?}: text, hex or base64"
            )))
        }
        None => {
            let body = value.strip_suffix(&[0]).unwrap_or(value);
            if body
                .iter()
                .all(|&b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t')
            {
                text(value)
            } else {
                format!("0s{}", parse::base64_encode(value))
            }
        }
    })
}

/// True when `name` is shown under -m `pattern` (a prefix, with an
/// optional leading '^' and '\.' for '.'; "-" or "" for every name).
fn shown(name: &str, pattern: &str) -> bool {
    if pattern == "-" || pattern.is_empty() || pattern == "." {
        return true;
    }
    let p = pattern.trim_start_matches('^').replace("\\.", ".");
    name.starts_with(&p)
}

/// Runs `xfskit getfattr`.
pub fn getfattr(a: GetArgs) -> Result<ExitCode, Error> {
    let fs = crate::cmd::open_in(&a.image, &a.disk, a.norecovery)?;
    encode(b"", a.encoding.as_deref())?;
    let pattern = a.pattern.clone().unwrap_or_else(|| "^user\\.".into());
    let mut out = Outcome::new("getfattr");
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    for pat in &a.paths {
        let paths = match expand(&fs, pat) {
            Ok(p) => p,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            let shown_path = if a.absolute {
                p.clone()
            } else {
                p.trim_start_matches('/').to_string()
            };
            let r = fs
                .lookup_path(p.as_bytes())
                .and_then(|ip| all_xattrs(&fs, &ip));
            let attrs = match r {
                Ok(v) => v,
                Err(e) => {
                    out.fail(&p, &e);
                    continue;
                }
            };
            let picked: Vec<&(String, Vec<u8>)> = match &a.name {
                Some(n) => match attrs.iter().find(|(k, _)| k == n) {
                    Some(x) => vec![x],
                    None => {
                        out.fail_msg(&p, &format!("{n}: no such attribute"), 1);
                        continue;
                    }
                },
                None => attrs.iter().filter(|(k, _)| shown(k, &pattern)).collect(),
            };
            if picked.is_empty() {
                continue;
            }
            if a.only_values {
                for (_, v) in &picked {
                    w.write_all(v)?;
                }
                continue;
            }
            writeln!(w, "# file: {shown_path}")?;
            for (k, v) in picked {
                if a.dump || a.name.is_some() {
                    writeln!(w, "{k}={}", encode(v, a.encoding.as_deref())?)?;
                } else {
                    writeln!(w, "{k}")?;
                }
            }
            writeln!(w)?;
        }
    }
    w.flush()?;
    Ok(out.code())
}
