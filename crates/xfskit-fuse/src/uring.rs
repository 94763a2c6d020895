//! FUSE over io_uring (Linux 6.14 and later, when the fuse module's
//! `enable_uring` parameter is on): requests arrive in per-CPU queues
//! instead of through read(2) on /dev/fuse, and each queue is served by a
//! thread pinned to that CPU. A request made on CPU n is served on CPU n,
//! so the round trip wakes no other CPU, which is what a small synchronous
//! request mostly costs on a machine with few CPUs.
//!
//! The kernel's protocol (include/uapi/linux/fuse.h, fs/fuse/dev_uring.c):
//! - INIT still goes through /dev/fuse (fuser does it); the reply carries
//!   FUSE_OVER_IO_URING ([`crate::dirplus`] asks for it).
//! - Each queue entry is registered with an IORING_OP_URING_CMD on the
//!   FUSE device (`FUSE_IO_URING_CMD_REGISTER`, a 128-byte SQE whose command
//!   area holds the queue id, and whose address is a two-iovec array: a
//!   288-byte header buffer and a payload buffer of at least `max_write`).
//!   Once every queue (one per possible CPU) has an entry, the kernel sends
//!   all requests but FORGET and INTERRUPT there; fuser keeps serving those
//!   from /dev/fuse.
//! - A request completes the entry's command: the header buffer then holds
//!   `fuse_in_header` (bytes 0..40), the opcode's fixed argument (128..)
//!   and the commit id and payload length (256..); the payload buffer holds
//!   the other arguments. The answer is written in place (`fuse_out_header`
//!   at 0, the reply's bytes in the payload, their length at 272) and sent
//!   with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also waits for the
//!   next request.
//!
//! io_uring itself comes from the `io-uring` crate; the only raw write is
//! the SQE's length field, which its `UringCmd80` builder does not set.

use crate::ops::{XfsFuse, MAX_IO};
use crate::placement::Placement;
use crate::wire;
use io_uring::{opcode, squeue::Entry128, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// `fuse_uring_req_header`: in/out header, op argument, ring entry data.
pub(crate) const HEADER_LEN: usize = 288;
/// Offset of the opcode's fixed argument in the header buffer.
pub(crate) const OP_IN: usize = 128;
/// Offset of `fuse_uring_ent_in_out` in the header buffer.
const ENT_IN_OUT: usize = 256;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Entries per queue: one is served while the kernel fills the others.
const DEPTH: usize = 4;

/// The CPU count the kernel sizes the ring by (`num_possible_cpus`).
pub(crate) fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let n: usize = text
        .trim()
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum();
    n.max(1)
}

/// Whether the fuse module lets servers use io_uring.
pub fn kernel_allows() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

/// Starts one pinned serving thread per possible CPU on the FUSE device
/// `dev`, once INIT is answered.
pub(crate) fn start(fs: &'static XfsFuse, dev: &'static OwnedFd) {
    let queues = possible_cpus();
    let placement = Placement::start();
    fs.start_write_behind(placement);
    for qid in 0..queues {
        let spawned = std::thread::Builder::new()
            .name(format!("xfskit-uring{qid}"))
            .spawn(move || {
                placement.join();
                if let Err(e) = serve_queue(fs, placement, dev.as_raw_fd(), qid as u16) {
                    // Requests made on this CPU would wait for ever: end the
                    // mount instead (the kernel then fails them with ENOTCONN;
                    // the log replays what was not yet written back).
                    eprintln!("xfskit-fuse: io_uring queue {qid} failed ({e}); stopping the mount");
                    std::process::exit(1);
                }
            });
        if let Err(e) = spawned {
            eprintln!("xfskit-fuse: no thread for io_uring queue {qid}: {e}");
        }
    }
}

/// One queue entry's buffers, at fixed addresses for the kernel.
struct Slot {
    header: Box<[u8; HEADER_LEN]>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

impl Slot {
    fn new() -> Slot {
        let mut header = Box::new([0u8; HEADER_LEN]);
        // The kernel needs room for max_write (or max_pages pages) of data.
        let mut payload = vec![0u8; MAX_IO as usize + 4096];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ]);
        Slot {
            header,
            payload,
            iov,
        }
    }

    fn commit_id(&self) -> u64 {
        u64::from_le_bytes(
            self.header[ENT_IN_OUT + 8..ENT_IN_OUT + 16]
                .try_into()
                .unwrap(),
        )
    }

    fn payload_len(&self) -> usize {
        u32::from_le_bytes(
            self.header[ENT_IN_OUT + 16..ENT_IN_OUT + 20]
                .try_into()
                .unwrap(),
        ) as usize
    }

    fn set_payload_len(&mut self, n: usize) {
        self.header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(n as u32).to_le_bytes());
    }
}

/// The 80-byte command area: `fuse_uring_cmd_req`.
fn cmd_area(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_le_bytes());
    c[16..18].copy_from_slice(&qid.to_le_bytes());
    c
}

fn register_sqe(dev: RawFd, slot: &mut Slot, qid: u16, index: usize) -> Entry128 {
    let mut e = opcode::UringCmd80::new(types::Fd(dev), CMD_REGISTER)
        .cmd(cmd_area(0, qid))
        .addr(Some(slot.iov.as_mut_ptr() as u64))
        .build()
        .user_data(index as u64);
    set_sqe_len(&mut e, 2);
    e
}

/// Sets `len` (bytes 24..28 of the SQE, here the iovec count).
#[allow(unsafe_code)]
fn set_sqe_len(e: &mut Entry128, len: u32) {
    const _: () = assert!(std::mem::size_of::<Entry128>() == 128);
    // SAFETY: Entry128 is a repr(C) 128-byte SQE; bytes 24..28 are its
    // `len` field, a plain u32 with no invariant.
    unsafe {
        std::ptr::from_mut(e)
            .cast::<u8>()
            .add(24)
            .cast::<u32>()
            .write_unaligned(len);
    }
}

pub(crate) fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

fn serve_queue(
    fs: &'static XfsFuse,
    placement: &Placement,
    dev: RawFd,
    qid: u16,
) -> io::Result<()> {
    pin_to_cpu(usize::from(qid));
    // The buffers first: locals drop in reverse order, so the ring (and
    // the kernel's hold on its commands) goes before them.
    let mut slots: Vec<Slot> = (0..DEPTH).map(|_| Slot::new()).collect();
    let mut ring: IoUring<Entry128> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build((DEPTH * 2) as u32)?;
    for (i, slot) in slots.iter_mut().enumerate() {
        push_register(&mut ring, dev, slot, qid, i)?;
    }
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(DEPTH);
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        for &(i, res) in &done {
            match res {
                // A registration made before the connection was initialized
                // (we start after INIT, so this is only a guard): again.
                r if r == -libc::EAGAIN => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    push_register(&mut ring, dev, &mut slots[i], qid, i)?;
                }
                // The connection went away (unmount, abort): stop serving.
                r if r < 0 => {
                    return match -r {
                        libc::ENOTCONN | libc::ECANCELED | libc::ENODEV | libc::ECONNABORTED => {
                            Ok(())
                        }
                        e => Err(io::Error::from_raw_os_error(e)),
                    };
                }
                _ => {
                    placement.served();
                    fs.behind.served_on(usize::from(qid));
                    answer(fs, &mut ring, &mut slots[i], dev, qid, i)?;
                }
            }
        }
    }
}

/// Queues the registration of entry `index` of queue `qid`.
fn push_register(
    ring: &mut IoUring<Entry128>,
    dev: RawFd,
    slot: &mut Slot,
    qid: u16,
    index: usize,
) -> io::Result<()> {
    let sqe = register_sqe(dev, slot, qid, index);
    // SAFETY of the kernel's use of the buffers: the slots outlive the ring
    // (both live until serve_queue returns, the ring dropped first).
    #[allow(unsafe_code)]
    unsafe {
        ring.submission().push(&sqe).map_err(io::Error::other)
    }
}

/// Serves the request in `slot` and queues its answer with a fetch.
fn answer(
    fs: &'static XfsFuse,
    ring: &mut IoUring<Entry128>,
    slot: &mut Slot,
    dev: RawFd,
    qid: u16,
    index: usize,
) -> io::Result<()> {
    let commit_id = slot.commit_id();
    let in_len = slot.payload_len().min(slot.payload.len());
    let out_len = wire::serve(
        fs,
        usize::from(qid),
        &mut slot.header,
        &mut slot.payload,
        in_len,
    );
    // (wire::serve answers EIO itself if answering panics.)
    slot.set_payload_len(out_len);
    let sqe = opcode::UringCmd80::new(types::Fd(dev), CMD_COMMIT_AND_FETCH)
        .cmd(cmd_area(commit_id, qid))
        .build()
        .user_data(index as u64);
    #[allow(unsafe_code)]
    // SAFETY: the slot's buffers stay in place for the ring's life.
    unsafe {
        if ring.submission().push(&sqe).is_err() {
            ring.submit()?;
            ring.submission().push(&sqe).map_err(io::Error::other)?;
        }
    }
    Ok(())
}
