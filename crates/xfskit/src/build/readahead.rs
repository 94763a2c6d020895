//! A reader that reads ahead on its own thread: the archive's file reads
//! and its decompression (gzip, zstd, xz) run beside the engine instead of
//! between its transactions.
//!
//! The thread fills chunks of [`CHUNK`] bytes and hands them over a channel
//! that holds at most [`DEPTH`] of them, so memory stays bounded whatever
//! the archive's size. Emptied chunks go back to the thread for reuse. An
//! error on the thread reaches the consumer in order, after the bytes read
//! before it. Dropping the reader stops the thread at its next chunk.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Bytes per chunk handed over.
pub const CHUNK: usize = 1 << 20;
/// Chunks in flight between the thread and the consumer.
pub const DEPTH: usize = 4;

/// What the thread sends: a filled chunk, or the error that ended it (the
/// end of the input is the channel closing).
type Msg = io::Result<Vec<u8>>;

/// The consumer's side: implements [`Read`] over the chunks.
pub struct ReadAhead {
    rx: Receiver<Msg>,
    back: SyncSender<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
    done: bool,
}

impl ReadAhead {
    /// Starts a thread reading `inner` ahead.
    pub fn new(mut inner: Box<dyn Read + Send>) -> ReadAhead {
        let (tx, rx) = sync_channel::<Msg>(DEPTH);
        let (back, spare) = sync_channel::<Vec<u8>>(DEPTH + 2);
        std::thread::spawn(move || {
            yield_cpu();
            loop {
                let mut buf = spare.try_recv().unwrap_or_default();
                buf.resize(CHUNK, 0);
                let mut n = 0;
                let res = loop {
                    if n == buf.len() {
                        break Ok(());
                    }
                    match inner.read(&mut buf[n..]) {
                        Ok(0) => break Ok(()),
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                buf.truncate(n);
                let end = n < CHUNK;
                if n > 0 && tx.send(Ok(buf)).is_err() {
                    return;
                }
                if let Err(e) = res {
                    let _ = tx.send(Err(e));
                    return;
                }
                if end {
                    return;
                }
            }
        });
        ReadAhead {
            rx,
            back,
            cur: Vec::new(),
            pos: 0,
            done: false,
        }
    }
}

/// Lowers the calling thread's priority (nice +5; Linux keeps it per
/// thread): a thread that reads or parses a source ahead of the engine has
/// slack (bounded queues wait on both sides), while the engine's worker and
/// the device's writer are the critical path; on a machine with fewer CPUs
/// than busy threads they get the CPU first. Best effort: nothing changes
/// if the call fails.
pub(crate) fn yield_cpu() {
    let _ = rustix::process::setpriority_process(None, 5);
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        while self.pos == self.cur.len() {
            if self.done {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Ok(next)) => {
                    let old = std::mem::replace(&mut self.cur, next);
                    let _ = self.back.try_send(old);
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => self.done = true,
            }
        }
        let n = out.len().min(self.cur.len() - self.pos);
        out[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives `data` in reads of at most `step` bytes, then fails if `fail`.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
        fail: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                if self.fail {
                    return Err(io::Error::other("broken input"));
                }
                return Ok(0);
            }
            let n = out.len().min(self.step).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn passes_every_byte_in_order() {
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 12345] {
            let data = pattern(len);
            let src = Trickle {
                data: data.clone(),
                at: 0,
                step: 70_001,
                fail: false,
            };
            let mut r = ReadAhead::new(Box::new(src));
            let mut got = Vec::new();
            let mut small = [0u8; 777];
            loop {
                let n = r.read(&mut small).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&small[..n]);
            }
            assert_eq!(got.len(), data.len(), "length {len}");
            assert!(got == data, "bytes differ for length {len}");
        }
    }

    #[test]
    fn error_arrives_after_the_bytes_before_it() {
        let data = pattern(2 * CHUNK + 10);
        let src = Trickle {
            data: data.clone(),
            at: 0,
            step: CHUNK / 3,
            fail: true,
        };
        let mut r = ReadAhead::new(Box::new(src));
        let mut got = Vec::new();
        let err = loop {
            let mut b = vec![0u8; 4096];
            match r.read(&mut b) {
                Ok(0) => panic!("end of input instead of the error"),
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) => break e,
            }
        };
        assert!(got == data, "bytes before the error differ");
        assert_eq!(err.to_string(), "broken input");
    }
}
