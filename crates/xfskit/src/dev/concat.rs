//! Pieces of other devices laid end to end: a logical volume made of
//! several segments.

use super::{Device, Window};
use std::io;

/// Windows read one after another as a single device.
pub struct Concat {
    /// Each piece with the offset where it starts in the whole.
    parts: Vec<(u64, Window)>,
    len: u64,
}

impl Concat {
    /// The pieces in order.
    pub fn new(pieces: Vec<Window>) -> Concat {
        let mut at = 0u64;
        let parts = pieces
            .into_iter()
            .map(|w| {
                let start = at;
                at += w.len();
                (start, w)
            })
            .collect();
        Concat { parts, len: at }
    }

    /// Calls `f(piece, offset in piece, range of buf)` for each piece the
    /// `n` bytes at `off` touch.
    fn each(
        &self,
        off: u64,
        n: usize,
        mut f: impl FnMut(&Window, u64, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        let end = off.checked_add(n as u64).filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("access at {off} past the end of a {}-byte volume", self.len),
            ));
        }
        let first = self.parts.partition_point(|(s, w)| s + w.len() <= off);
        let mut done = 0usize;
        for (start, w) in &self.parts[first..] {
            if done == n {
                break;
            }
            let pos = off + done as u64;
            let within = pos - start;
            let take = ((w.len() - within) as usize).min(n - done);
            f(w, within, done..done + take)?;
            done += take;
        }
        Ok(())
    }
}

impl Device for Concat {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.each(off, buf.len(), |w, at, r| w.read_at(&mut buf[r], at))
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.each(off, buf.len(), |w, at, r| w.write_at(&buf[r], at))
    }

    fn flush(&self) -> io::Result<()> {
        self.parts.iter().try_for_each(|(_, w)| w.flush())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use std::sync::Arc;

    #[test]
    fn reads_across_pieces() {
        let d: Arc<dyn Device> = Arc::new(MemDevice::from_bytes((0..100u8).collect()));
        let c = Concat::new(vec![
            Window::new(d.clone(), 50, 10).unwrap(),
            Window::new(d.clone(), 0, 5).unwrap(),
            Window::new(d, 90, 10).unwrap(),
        ]);
        assert_eq!(c.len(), 25);
        let mut b = [0u8; 10];
        c.read_at(&mut b, 6).unwrap();
        assert_eq!(b, [56, 57, 58, 59, 0, 1, 2, 3, 4, 90]);
        assert!(c.read_at(&mut b, 16).is_err());
        c.write_at(&[7, 7], 14).unwrap();
        c.read_at(&mut b[..2], 14).unwrap();
        assert_eq!(&b[..2], &[7, 7]);
    }
}
