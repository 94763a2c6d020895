//! Shell-style globs over paths in an image: `*`, `?`, `[abc]`, `[a-z]`,
//! `[!x]` (or `[^x]`) within one path component, `\` quoting the next
//! character. A name starting with '.' is matched only by a pattern
//! component starting with '.', and "." and ".." never are, as in the
//! shell. A pattern without glob characters is returned as it is (a
//! missing path is then reported by the command); one that matches
//! nothing is an error naming it.

use xfskit::inode::FileType;
use xfskit::{Error, Fs};

/// True when `s` holds an unquoted glob character.
fn is_glob(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 1,
            b'*' | b'?' | b'[' => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// `s` with the quoting backslashes removed.
fn unquote(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 1 < s.len() {
            i += 1;
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// Matches a bracket expression starting after '[' at `p[i..]` against
/// byte `c`; returns (matched, index after ']'), or None when the bracket
/// is not closed (then '[' is an ordinary character).
fn bracket(p: &[u8], mut i: usize, c: u8) -> Option<(bool, usize)> {
    let negate = i < p.len() && (p[i] == b'!' || p[i] == b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        let mut lo = p[i];
        if lo == b'\\' && i + 1 < p.len() {
            i += 1;
            lo = p[i];
        }
        i += 1;
        if i + 1 < p.len() && p[i] == b'-' && p[i + 1] != b']' {
            let mut hi = p[i + 1];
            i += 2;
            if hi == b'\\' && i < p.len() {
                hi = p[i];
                i += 1;
            }
            hit |= lo <= c && c <= hi;
        } else {
            hit |= lo == c;
        }
    }
    None
}

/// True when `name` matches the one-component pattern `p`.
pub fn matches(p: &[u8], name: &[u8]) -> bool {
    // Iterative matching with one backtrack point for the last '*': time
    // in proportion to pattern times name, no recursion.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < name.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi + 1, ni));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = bracket(p, pi + 1, name[ni]) {
                        if ok {
                            pi = next;
                            ni += 1;
                            continue;
                        }
                    } else if name[ni] == b'[' {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() && p[pi + 1] == name[ni] => {
                    pi += 2;
                    ni += 1;
                    continue;
                }
                b'\\' if pi + 1 < p.len() => {}
                c if c == name[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Expands `pattern` to the existing paths it matches, sorted by name
/// within each directory; a pattern without glob characters comes back
/// unchanged (quotes removed).
pub fn expand(fs: &Fs, pattern: &str) -> Result<Vec<String>, Error> {
    let bytes = pattern.as_bytes();
    if !is_glob(bytes) {
        return Ok(vec![String::from_utf8_lossy(&unquote(bytes)).into_owned()]);
    }
    let absolute = bytes.first() == Some(&b'/');
    let mut found: Vec<Vec<u8>> = vec![Vec::new()];
    let comps: Vec<&[u8]> = bytes
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    let last = comps.len().saturating_sub(1);
    for (k, comp) in comps.iter().enumerate() {
        let mut next = Vec::new();
        for base in &found {
            if !is_glob(comp) {
                let mut p = base.clone();
                p.push(b'/');
                p.extend(unquote(comp));
                // Intermediate components must exist to go on.
                if k == last || fs.lookup_path(&p).is_ok() {
                    next.push(p);
                }
                continue;
            }
            let dir = match fs.lookup_path(base) {
                Ok(d) if d.file_type == FileType::Dir => d,
                _ => continue,
            };
            let mut names: Vec<Vec<u8>> = xfskit::dir::read_dir(fs, &dir)?
                .into_iter()
                .map(|e| e.name)
                .filter(|n| n != b"." && n != b"..")
                .filter(|n| n.first() != Some(&b'.') || comp.first() == Some(&b'.'))
                .filter(|n| matches(comp, n))
                .collect();
            names.sort();
            for n in names {
                let mut p = base.clone();
                p.push(b'/');
                p.extend(n);
                next.push(p);
            }
        }
        found = next;
    }
    if found.is_empty() {
        return Err(Error::NotFound(format!("no match for {pattern}")));
    }
    Ok(found
        .into_iter()
        .map(|p| {
            let s = String::from_utf8_lossy(&p).into_owned();
            if absolute {
                s
            } else {
                s.trim_start_matches('/').to_string()
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_as_the_shell_does() {
        assert!(matches(b"*.rpmnew", b"passwd.rpmnew"));
        assert!(!matches(b"*.rpmnew", b"passwd.rpmnew.x"));
        assert!(matches(b"a?c", b"abc"));
        assert!(!matches(b"a?c", b"ac"));
        assert!(matches(b"[a-c]x", b"bx"));
        assert!(!matches(b"[!a-c]x", b"bx"));
        assert!(matches(b"[^a-c]x", b"dx"));
        assert!(matches(b"\\*", b"*"));
        assert!(!matches(b"\\*", b"a"));
        assert!(matches(b"*a*b*", b"xxaxxbxx"));
        assert!(!matches(b"*a*b", b"xxaxxbxx"));
        assert!(matches(b"[", b"["));
        assert!(matches(b"[]]", b"]"));
        assert!(matches(b"*", b""));
    }
}
