//! LVM2's text metadata: sections `name { ... }` holding `key = value`
//! lines, where a value is a number, a "string" or a [list, of, values];
//! `#` starts a comment. The volume group's description is one section.

/// A value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Str(String),
    List(Vec<Value>),
    Section(Section),
}

/// A section: its entries in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Section {
    pub entries: Vec<(String, Value)>,
}

impl Section {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The subsection `key`.
    pub fn section(&self, key: &str) -> Option<&Section> {
        match self.get(key)? {
            Value::Section(s) => Some(s),
            _ => None,
        }
    }

    /// The number `key`.
    pub fn int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The string `key`.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Every subsection, with its name.
    pub fn sections(&self) -> impl Iterator<Item = (&str, &Section)> {
        self.entries.iter().filter_map(|(k, v)| match v {
            Value::Section(s) => Some((k.as_str(), s)),
            _ => None,
        })
    }
}

impl Section {
    /// The subsection `key`, to change.
    pub fn section_mut(&mut self, key: &str) -> Option<&mut Section> {
        self.entries.iter_mut().find_map(|(k, v)| match v {
            Value::Section(s) if k == key => Some(s),
            _ => None,
        })
    }

    /// Sets `key` to `value`, in place when it is there, at the end
    /// otherwise.
    pub fn set(&mut self, key: &str, value: Value) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.entries.push((key.to_string(), value)),
        }
    }
}

/// The text of `top`, as LVM writes it: one `key = value` per line,
/// sections as `name {` ... `}` (comments are not kept).
pub fn write(top: &Section) -> Vec<u8> {
    fn value(out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
            Value::Str(s) => {
                out.push(b'"');
                for &c in s.as_bytes() {
                    if c == b'"' || c == b'\\' {
                        out.push(b'\\');
                    }
                    out.push(c);
                }
                out.push(b'"');
            }
            Value::List(items) => {
                out.push(b'[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b", ");
                    }
                    value(out, x);
                }
                out.push(b']');
            }
            Value::Section(s) => section(out, s),
        }
    }
    fn section(out: &mut Vec<u8>, s: &Section) {
        for (k, v) in &s.entries {
            out.extend_from_slice(k.as_bytes());
            match v {
                Value::Section(inner) => {
                    out.extend_from_slice(b" {\n");
                    section(out, inner);
                    out.extend_from_slice(b"}\n");
                }
                _ => {
                    out.extend_from_slice(b" = ");
                    value(out, v);
                    out.push(b'\n');
                }
            }
        }
    }
    let mut out = Vec::new();
    section(&mut out, top);
    out
}

/// Deepest nesting accepted (real metadata nests 4 deep).
const DEPTH_MAX: usize = 16;

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

/// Parses metadata text; the error says what was expected where.
pub fn parse(text: &[u8]) -> Result<Section, String> {
    let mut p = Parser { s: text, at: 0 };
    let top = p.entries(0)?;
    p.skip();
    if p.at < p.s.len() {
        return Err(p.err("an entry or the end"));
    }
    Ok(top)
}

impl Parser<'_> {
    fn err(&self, want: &str) -> String {
        format!("metadata text at byte {}: expected {want}", self.at)
    }

    fn skip(&mut self) {
        while let Some(&c) = self.s.get(self.at) {
            if c == b'#' {
                while self.s.get(self.at).is_some_and(|&c| c != b'\n') {
                    self.at += 1;
                }
            } else if c.is_ascii_whitespace() || c == 0 {
                self.at += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip();
        self.s.get(self.at).copied()
    }

    fn ident(&mut self) -> Option<String> {
        self.skip();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || b"_.+-".contains(&c))
        {
            self.at += 1;
        }
        (self.at > start).then(|| String::from_utf8_lossy(&self.s[start..self.at]).into_owned())
    }

    /// Entries up to a `}` or the end.
    fn entries(&mut self, depth: usize) -> Result<Section, String> {
        if depth > DEPTH_MAX {
            return Err(self.err("less nesting"));
        }
        let mut sec = Section::default();
        loop {
            match self.peek() {
                None | Some(b'}') => return Ok(sec),
                _ => {}
            }
            let Some(key) = self.ident() else {
                return Err(self.err("a name"));
            };
            match self.peek() {
                Some(b'{') => {
                    self.at += 1;
                    let inner = self.entries(depth + 1)?;
                    if self.peek() != Some(b'}') {
                        return Err(self.err("'}'"));
                    }
                    self.at += 1;
                    sec.entries.push((key, Value::Section(inner)));
                }
                Some(b'=') => {
                    self.at += 1;
                    let v = self.value(depth)?;
                    sec.entries.push((key, v));
                }
                _ => return Err(self.err("'{' or '='")),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        match self.peek() {
            Some(b'"') => self.string().map(Value::Str),
            Some(b'[') => {
                if depth > DEPTH_MAX {
                    return Err(self.err("less nesting"));
                }
                self.at += 1;
                let mut items = Vec::new();
                loop {
                    match self.peek() {
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Value::List(items));
                        }
                        Some(b',') if !items.is_empty() => self.at += 1,
                        None => return Err(self.err("']'")),
                        _ => items.push(self.value(depth + 1)?),
                    }
                }
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.at;
                self.at += 1;
                while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
                    self.at += 1;
                }
                let t = String::from_utf8_lossy(&self.s[start..self.at]);
                t.parse().map(Value::Int).map_err(|_| self.err("a number"))
            }
            _ => Err(self.err("a value")),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            match self.s.get(self.at) {
                None => return Err(self.err("a closing '\"'")),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    if let Some(&c) = self.s.get(self.at + 1) {
                        out.push(c);
                    }
                    self.at += 2;
                }
                Some(&c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"vg0 {
id = "abc"
seqno = 3
status = ["RESIZEABLE", "READ", "WRITE"]
extent_size = 8192 # 4 MiB
physical_volumes {
pv0 {
id = "Xy-1"
pe_start = 2048
}
}
logical_volumes {
root {
segment1 {
start_extent = 0
stripes = [
"pv0", 0
]
}
}
}
}
# Generated by LVM2
contents = "Text Format Volume Group"
description = "a \"quoted\" word"
"#;

    #[test]
    fn parses_a_volume_group() {
        let top = parse(SAMPLE.as_bytes()).unwrap();
        let vg = top.section("vg0").unwrap();
        assert_eq!(vg.int("extent_size"), Some(8192));
        let pv = vg
            .section("physical_volumes")
            .unwrap()
            .section("pv0")
            .unwrap();
        assert_eq!(pv.str("id"), Some("Xy-1"));
        let seg = vg
            .section("logical_volumes")
            .unwrap()
            .section("root")
            .unwrap();
        let stripes = seg.section("segment1").unwrap().get("stripes").unwrap();
        assert_eq!(
            stripes,
            &Value::List(vec![Value::Str("pv0".into()), Value::Int(0)])
        );
        assert_eq!(top.str("description"), Some("a \"quoted\" word"));
    }

    #[test]
    fn written_text_parses_back_the_same() {
        let top = parse(SAMPLE.as_bytes()).unwrap();
        let text = write(&top);
        assert_eq!(parse(&text).unwrap(), top);
        assert!(String::from_utf8_lossy(&text).contains("description = \"a \\\"quoted\\\" word\""));
    }

    #[test]
    fn every_prefix_parses_or_fails_cleanly() {
        for n in 0..SAMPLE.len() {
            let _ = parse(&SAMPLE.as_bytes()[..n]);
        }
        assert!(parse(b"a { b = }").is_err());
        assert!(parse(&b"x {".repeat(100)).is_err());
        assert!(parse(&b"x = [".repeat(100)).is_err());
    }
}
