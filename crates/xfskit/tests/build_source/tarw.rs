//! A tiny pax tar writer for hand-made test archives (any path length, any
//! entry order, duplicates).

pub struct Entry {
    path: String,
    flag: u8,
    mode: u32,
    mtime: u64,
    link: String,
    data: Vec<u8>,
}

pub fn file(path: &str, data: &[u8]) -> Entry {
    Entry {
        path: path.into(),
        flag: b'0',
        mode: 0o644,
        mtime: 1000,
        link: String::new(),
        data: data.to_vec(),
    }
}

pub fn dir(path: &str, mode: u32, mtime: u64) -> Entry {
    Entry {
        path: path.into(),
        flag: b'5',
        mode,
        mtime,
        link: String::new(),
        data: Vec::new(),
    }
}

pub fn hardlink(path: &str, target: &str) -> Entry {
    Entry {
        path: path.into(),
        flag: b'1',
        mode: 0o644,
        mtime: 1000,
        link: target.into(),
        data: Vec::new(),
    }
}

fn octal(h: &mut [u8], v: u64) {
    let s = format!("{:0w$o}", v, w = h.len() - 1);
    h[..s.len()].copy_from_slice(s.as_bytes());
}

fn header(name: &str, flag: u8, mode: u32, mtime: u64, size: u64, link: &str) -> [u8; 512] {
    let mut h = [0u8; 512];
    let n = name.as_bytes();
    h[..n.len().min(100)].copy_from_slice(&n[..n.len().min(100)]);
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime);
    h[156] = flag;
    let l = link.as_bytes();
    h[157..157 + l.len().min(100)].copy_from_slice(&l[..l.len().min(100)]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

fn record(key: &str, value: &str) -> String {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}{body}").len() != len {
        len += 1;
    }
    format!("{len}{body}")
}

fn push(out: &mut Vec<u8>, h: [u8; 512], data: &[u8]) {
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
}

pub fn archive(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let pax = record("path", &e.path);
        push(
            &mut out,
            header("PaxHeader", b'x', 0o644, 0, pax.len() as u64, ""),
            pax.as_bytes(),
        );
        let h = header(
            &e.path,
            e.flag,
            e.mode,
            e.mtime,
            e.data.len() as u64,
            &e.link,
        );
        push(&mut out, h, &e.data);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}
