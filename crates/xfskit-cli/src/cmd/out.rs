//! Standard output and standard error as a pipeline expects them.
//!
//! `println!` panics when its write fails, and a reader that stops early
//! (`xfskit log IMAGE | head -1`) closes the pipe under it. Every command
//! prints through [`outln!`], [`out!`], [`errln!`] and [`errout!`] instead:
//! a closed pipe ends that stream's output quietly while the command
//! finishes its work (an edit or a recovery is never cut short by its own
//! report) and exits with its usual code; any other failure to write
//! standard output (a full disk behind a redirection) is reported once at
//! the end and makes the exit code 4, the I/O error's.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Standard output was closed by its reader: nothing more is written.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
/// Standard error was closed by its reader.
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
/// The first failure to write standard output other than a closed pipe.
static STDOUT_ERROR: Mutex<Option<io::Error>> = Mutex::new(None);

/// Writes to standard output (the expansion of [`outln!`] and [`out!`]).
pub fn stdout(args: fmt::Arguments<'_>) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut o = io::stdout().lock();
    if let Err(e) = o.write_fmt(args) {
        stdout_failed(e);
    }
}

/// Notes a failed write of standard output made by other means than
/// [`stdout`] (a locked writer of a command's own): true when the pipe was
/// closed, so that the caller stops writing.
pub fn stdout_failed(e: io::Error) -> bool {
    if e.kind() == io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        return true;
    }
    let mut first = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
    if first.is_none() {
        *first = Some(e);
    }
    STDOUT_CLOSED.store(true, Ordering::Relaxed);
    false
}

/// Writes to standard error (the expansion of [`errln!`] and [`errout!`]);
/// a failure there has nowhere to be reported and is dropped.
pub fn stderr(args: fmt::Arguments<'_>) {
    if STDERR_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    if io::stderr().lock().write_fmt(args).is_err() {
        STDERR_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// At the end of a command: flushes standard output and returns the error
/// that writing it met, when it was not a closed pipe.
pub fn finish() -> Option<io::Error> {
    if !STDOUT_CLOSED.load(Ordering::Relaxed) {
        if let Err(e) = io::stdout().lock().flush() {
            stdout_failed(e);
        }
    }
    STDOUT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
}

/// `println!` that ends quietly on a closed pipe (see the module).
macro_rules! outln {
    () => { $crate::cmd::out::stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cmd::out::stdout(format_args!("{}\n", format_args!($($t)*))) };
}

/// `print!` that ends quietly on a closed pipe (see the module).
macro_rules! out {
    ($($t:tt)*) => { $crate::cmd::out::stdout(format_args!($($t)*)) };
}

/// `eprintln!` that ends quietly on a closed pipe (see the module).
macro_rules! errln {
    () => { $crate::cmd::out::stderr(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cmd::out::stderr(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprint!` that ends quietly on a closed pipe (see the module).
macro_rules! errout {
    ($($t:tt)*) => { $crate::cmd::out::stderr(format_args!($($t)*)) };
}

pub(crate) use {errln, errout, out, outln};
