//! Disk images read in place from object storage and HTTP servers.
//!
//! [`open_image`] takes an `s3://`, `gs://`, `az://` (also `abfs://`,
//! `azure://`) or `http(s)://` URL and returns the XFS filesystem in the
//! object as [`xfskit::disk::open`] does for a local file: raw or qcow2, a
//! bare filesystem, a partitioned disk or LVM2 volumes. The object is read
//! through a [`RemoteDevice`] (ranged GETs, a fixed-size chunk cache,
//! read-ahead), never downloaded whole. Credentials and endpoints come
//! from the environment the cloud tools use (`AWS_*`, `GOOGLE_*`,
//! `AZURE_*`; `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP=true` for an
//! S3-compatible server), overridden by `storage_options` (object_store's
//! configuration keys, such as `aws_access_key_id` or `endpoint`).
//!
//! This crate holds the async runtime and the HTTP stack, so that the
//! engine's own build has neither.

mod device;
mod store;

pub use device::{CacheOptions, RemoteDevice, Stats};
pub use object_store;
pub use store::{backing_url, from_store, is_url, open_device};

use device::Counters;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xfskit::dev::Device;
use xfskit::disk::{Format, Image, ImageOptions};
use xfskit::error::{Error, Result};

/// What every remote device of the process fetched.
pub(crate) static GLOBAL: Counters = Counters::new_const();

/// The requests and bytes every remote device of this process fetched (the
/// CLI prints them when `XFSKIT_REMOTE_STATS` is set).
pub fn totals() -> Stats {
    GLOBAL.snapshot()
}

/// The disk in the object at `url`: the object itself, or the disk inside
/// it when it is a VM disk file (qcow2, VMDK, VHD, VHDX, VDI).
pub fn open_disk(
    url: &str,
    storage_options: &[(String, String)],
    cache: CacheOptions,
) -> Result<(Arc<dyn Device>, Format)> {
    let dev = open_device(url, storage_options, cache)?;
    let format = xfskit::disk::container::detect(&dev)?;
    if format == Format::Raw {
        return Ok((Arc::new(dev), Format::Raw));
    }
    // Backing files, parents and extents are read in place too, each name
    // resolved against the URL of the file that names it.
    let backing = |at: &Path, name: &str| -> Result<(PathBuf, Box<dyn Device>)> {
        let at = at.to_str().unwrap_or_default();
        let burl = backing_url(at, name)?;
        let dev = open_device(&burl, storage_options, cache).map_err(|e| match e {
            Error::Io(io) => Error::Io(std::io::Error::new(
                io.kind(),
                format!("backing file {name} of {at}: {io}"),
            )),
            e => e,
        })?;
        Ok((PathBuf::from(burl), Box::new(dev)))
    };
    let disk = xfskit::disk::container::open(Path::new(url), Box::new(dev), format, &backing)?;
    Ok((disk, format))
}

/// Opens the XFS filesystem in the image at `url` (read-only), as
/// [`xfskit::disk::open`] opens a local one.
pub fn open_image(
    url: &str,
    storage_options: &[(String, String)],
    opts: &ImageOptions,
) -> Result<Image> {
    if opts.writable {
        return Err(Error::Unsupported(format!(
            "{url}: images in object storage or on HTTP servers are read-only"
        )));
    }
    let (disk, format) = open_disk(url, storage_options, CacheOptions::default())?;
    xfskit::disk::open_device(disk, format, opts, url)
}

/// Describes what the disk at `url` holds (`xfskit parts`).
pub fn list(url: &str, storage_options: &[(String, String)]) -> Result<xfskit::disk::Listing> {
    let (disk, format) = open_disk(url, storage_options, CacheOptions::default())?;
    xfskit::disk::list_device(&disk, format)
}
