//! A small HTTP/1.1 file server with Range support (HEAD, GET of
//! `bytes=A-B`, If-Match against its ETag, keep-alive), serving one
//! directory on 127.0.0.1, and counting the requests and body bytes it
//! sends, so that a test sees what a client fetched.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What the server sent so far.
#[derive(Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
}

pub struct RangeServer {
    pub port: u16,
    pub counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
}

impl RangeServer {
    /// Serves the files of `dir` until dropped.
    pub fn start(dir: &Path) -> RangeServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = l.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, d) = (counts.clone(), stop.clone(), dir.to_path_buf());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (c, d) = (c.clone(), d.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &d, &c);
                });
            }
        });
        RangeServer { port, counts, stop }
    }

    /// The URL of `name` in the served directory.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// (requests, bytes) sent so far.
    pub fn sent(&self) -> (u64, u64) {
        (
            self.counts.requests.load(Ordering::Relaxed),
            self.counts.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for RangeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(conn: TcpStream, dir: &Path, counts: &Counts) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("/").to_string();
        let (mut range, mut if_match, mut body_len) = (None, None, 0usize);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let Some((k, v)) = h.split_once(':') else {
                continue;
            };
            let v = v.trim().to_string();
            match k.to_ascii_lowercase().as_str() {
                "range" => range = Some(v),
                "if-match" => if_match = Some(v),
                "content-length" => body_len = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        let mut skip = vec![0u8; body_len];
        r.read_exact(&mut skip)?;
        counts.requests.fetch_add(1, Ordering::Relaxed);
        let name = target.trim_start_matches('/');
        let path: PathBuf = dir.join(name);
        let file = if name.contains("..") || name.is_empty() {
            None
        } else {
            std::fs::File::open(&path).ok()
        };
        let Some(mut file) = file else {
            write!(out, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        let size = file.metadata()?.len();
        let etag = format!("\"{size:x}\"");
        if if_match.as_ref().is_some_and(|m| m != &etag && m != "*") {
            write!(
                out,
                "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n"
            )?;
            continue;
        }
        let want = range.as_deref().and_then(|r| {
            let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
            let a: u64 = a.parse().ok()?;
            let b: u64 = if b.is_empty() {
                size - 1
            } else {
                b.parse().ok()?
            };
            Some((a, b.min(size.saturating_sub(1))))
        });
        let (status, start, len) = match want {
            Some((a, b)) if a <= b && a < size => ("206 Partial Content", a, b - a + 1),
            Some(_) => {
                write!(
                    out,
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\nContent-Length: 0\r\n\r\n"
                )?;
                continue;
            }
            None => ("200 OK", 0, size),
        };
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n"
        );
        if want.is_some() {
            head += &format!(
                "Content-Range: bytes {start}-{}/{size}\r\n",
                start + len - 1
            );
        }
        head += "\r\n";
        out.write_all(head.as_bytes())?;
        if method == "HEAD" {
            continue;
        }
        file.seek(SeekFrom::Start(start))?;
        let mut left = len;
        let mut buf = vec![0u8; 1 << 16];
        while left > 0 {
            let n = (left as usize).min(buf.len());
            file.read_exact(&mut buf[..n])?;
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        counts.bytes.fetch_add(len, Ordering::Relaxed);
    }
}
