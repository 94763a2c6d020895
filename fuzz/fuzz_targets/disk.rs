//! Fuzz target: disk images. The first byte picks what the rest is: a raw
//! disk (partition tables, LVM labels and metadata, filesystem magics are
//! read and the filesystem chosen) or a qcow2 file (header, extensions, L1
//! and L2 tables, compressed clusters are read). Any panic, hang or huge
//! allocation is a bug; errors are the expected outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Arc;
use xfskit::dev::{Device, MemDevice};
use xfskit::disk::{self, qcow2::Qcow2, Format, ImageOptions};

/// Reads a few places of `dev`, as opening a filesystem would.
fn touch(dev: &dyn Device) {
    let len = dev.len();
    let mut b = vec![0u8; 4096];
    for off in [0, len / 2, len.saturating_sub(4096)] {
        let n = (len - off.min(len)).min(4096) as usize;
        let _ = dev.read_at(&mut b[..n], off);
    }
}

fn raw(disk: Arc<dyn Device>, format: Format) {
    let _ = disk::list_device(&disk, format);
    if let Ok(img) = disk::open_device(disk, format, &ImageOptions::default(), "fuzz") {
        touch(img.device.as_ref());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let file = MemDevice::from_bytes(rest.to_vec());
    if mode % 2 == 0 {
        raw(Arc::new(file), Format::Raw);
    } else if let Ok(q) = Qcow2::open(Path::new("/nonexistent/fuzz.qcow2"), Box::new(file)) {
        touch(&q);
        raw(Arc::new(q), Format::Qcow2);
    }
});
