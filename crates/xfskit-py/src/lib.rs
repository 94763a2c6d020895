//! The `xfskit` Python package's native module (`xfskit._xfskit`): the
//! engine opened on an image file, a disk image or a Python file object,
//! with every engine call made with the GIL released. The Python layer
//! (python/xfskit) gives it the shape of `os`, `os.path` and `io`.

mod deleted;
mod entry;
mod errors;
mod file;
mod fsys;
mod pydev;
mod resolve;
mod scan;
mod stat;
mod write;

use errors::WithPath;
use fsys::PyFs;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use xfskit::disk::{Image, ImageOptions};
use xfskit::{Fs, OpenOptions};

fn engine_open(
    img: Image,
    writable: bool,
    norecovery: bool,
    rtdev: Option<PathBuf>,
) -> PyResult<PyFs> {
    let fs = if writable {
        Fs::from_device_rw(
            img.device,
            &OpenOptions {
                rtdev,
                ..Default::default()
            },
        )
    } else {
        Fs::from_device(
            img.device,
            &OpenOptions {
                norecovery,
                rtdev,
                ..Default::default()
            },
        )
    }
    .py()?;
    Ok(PyFs::new(fs, writable))
}

/// Opens the filesystem in the image at `path` (a bare filesystem, a
/// partitioned disk, LVM2 volumes, qcow2): returns (Fs, warnings).
#[pyfunction]
#[pyo3(signature = (path, partition=None, lv=None, writable=false, norecovery=false, rtdev=None))]
fn open_path(
    py: Python<'_>,
    path: PathBuf,
    partition: Option<u32>,
    lv: Option<String>,
    writable: bool,
    norecovery: bool,
    rtdev: Option<PathBuf>,
) -> PyResult<(PyFs, Vec<String>)> {
    py.detach(|| {
        let opts = ImageOptions {
            partition,
            lv,
            writable,
        };
        let img = xfskit::disk::open(&path, &opts).at(path.as_os_str().as_encoded_bytes())?;
        let notes = img.notes.clone();
        Ok((engine_open(img, writable, norecovery, rtdev)?, notes))
    })
}

/// Opens the filesystem read through a Python file object (`seek` and
/// `read`): raw or qcow2 (without a backing file), partitions and LVM
/// found as for files. `name` names it in messages.
#[pyfunction]
#[pyo3(signature = (fileobj, name, partition=None, lv=None, norecovery=false))]
fn open_fileobj(
    py: Python<'_>,
    fileobj: &Bound<'_, PyAny>,
    name: String,
    partition: Option<u32>,
    lv: Option<String>,
    norecovery: bool,
) -> PyResult<(PyFs, Vec<String>)> {
    let dev = pydev::PyFileDevice::new(fileobj)?;
    py.detach(|| {
        let format = xfskit::disk::container::detect(&dev).py()?;
        let disk = xfskit::disk::container::open(
            std::path::Path::new(&name),
            Box::new(dev),
            format,
            &xfskit::disk::container::local_opener,
        )
        .py()?;
        let opts = ImageOptions {
            partition,
            lv,
            writable: false,
        };
        let img = xfskit::disk::open_device(disk, format, &opts, &name).py()?;
        let notes = img.notes.clone();
        Ok((engine_open(img, false, norecovery, None)?, notes))
    })
}

/// Opens the filesystem in the object at `url` (`s3://`, `gs://`,
/// `az://`, `http(s)://`), read in place by ranged requests; credentials
/// from the environment, overridden by `storage_options` (object_store
/// configuration keys).
#[pyfunction]
#[pyo3(signature = (url, storage_options=None, partition=None, lv=None, norecovery=false))]
fn open_url(
    py: Python<'_>,
    url: String,
    storage_options: Option<std::collections::BTreeMap<String, String>>,
    partition: Option<u32>,
    lv: Option<String>,
    norecovery: bool,
) -> PyResult<(PyFs, Vec<String>)> {
    let options: Vec<(String, String)> = storage_options.unwrap_or_default().into_iter().collect();
    py.detach(|| {
        let opts = ImageOptions {
            partition,
            lv,
            writable: false,
        };
        let img = xfskit_remote::open_image(&url, &options, &opts).map_err(|e| match e {
            // A missing object is a missing file (the error carries no errno).
            xfskit::Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                errors::os(libc::ENOENT, io.to_string(), Some(url.as_bytes()))
            }
            e => errors::engine(e, Some(url.as_bytes())),
        })?;
        let notes = img.notes.clone();
        Ok((engine_open(img, false, norecovery, None)?, notes))
    })
}

/// True when `name` is a URL that `open_url` reads.
#[pyfunction]
fn is_url(name: &str) -> bool {
    xfskit_remote::is_url(name)
}

/// What every remote image opened by this process fetched: a dict of
/// requests and bytes.
#[pyfunction]
fn remote_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let t = xfskit_remote::totals();
    let d = PyDict::new(py);
    d.set_item("requests", t.requests)?;
    d.set_item("bytes", t.bytes)?;
    Ok(d)
}

fn usage(e: impl std::fmt::Display) -> PyErr {
    errors::os(libc::EINVAL, e.to_string(), None)
}

/// Makes a filesystem as `xfskit mkfs` does: `args` are mkfs.xfs options
/// (the target last), `defaults` a feature profile ("6.1", "6.18"...).
/// Returns the geometry as a dict.
#[pyfunction]
#[pyo3(signature = (args, defaults=None))]
fn mkfs(py: Python<'_>, args: Vec<String>, defaults: Option<String>) -> PyResult<Py<PyDict>> {
    let g = py.detach(|| {
        let mut opts = xfskit::mkfs::parse_mkfs_args(&args).map_err(usage)?;
        if let Some(d) = &defaults {
            opts.defaults = Some(xfskit::mkfs::Defaults::parse(d).map_err(usage)?);
        }
        let target = opts
            .data_name
            .clone()
            .ok_or_else(|| usage("no target given"))?;
        xfskit::mkfs::mkfs(std::path::Path::new(&target), &opts).map_err(usage)
    })?;
    let d = PyDict::new(py);
    d.set_item("agcount", g.agcount)?;
    d.set_item("agblocks", g.agblocks)?;
    d.set_item("blocksize", g.blocksize)?;
    d.set_item("dblocks", g.dblocks)?;
    d.set_item("inodesize", g.inodesize)?;
    d.set_item("summary", xfskit::mkfs::geometry_summary(&g))?;
    Ok(d.unbind())
}

/// Builds image `image` from `source` (a directory or a tar archive) as
/// `xfskit build` does; `mkfs_args` are mkfs.xfs options. Returns counts.
#[pyfunction]
#[pyo3(signature = (source, image, size="auto".to_string(), slack="10%+16m".to_string(), defaults=None, reproducible=false, owner=None, mkfs_args=Vec::new(), jobs=1))]
#[allow(clippy::too_many_arguments)]
fn build(
    py: Python<'_>,
    source: PathBuf,
    image: PathBuf,
    size: String,
    slack: String,
    defaults: Option<String>,
    reproducible: bool,
    owner: Option<String>,
    mkfs_args: Vec<String>,
    jobs: usize,
) -> PyResult<Py<PyDict>> {
    use xfskit::build::{idmap, size as bsize, BuildOptions, Source};
    let r = py.detach(|| {
        let mut mkfs = xfskit::mkfs::parse_mkfs_args(&mkfs_args).map_err(usage)?;
        if let Some(d) = &defaults {
            mkfs.defaults = Some(xfskit::mkfs::Defaults::parse(d).map_err(usage)?);
        }
        let ids = idmap::IdMap {
            owner: owner.as_deref().map(idmap::parse_owner).transpose().py()?,
            ..Default::default()
        };
        let opts = BuildOptions {
            mkfs,
            size: bsize::parse_size(&size).py()?,
            slack: bsize::parse_slack(&slack).py()?,
            ids,
            reproducible,
            jobs: jobs.max(1),
            ..Default::default()
        };
        let src = Source::open(&source).py()?;
        xfskit::build::build(&src, &image, &opts, xfskit::build::write_engine).py()
    })?;
    let f = &r.fed;
    let d = PyDict::new(py);
    d.set_item("dirs", f.dirs)?;
    d.set_item("files", f.files)?;
    d.set_item("symlinks", f.symlinks)?;
    d.set_item("specials", f.specials)?;
    d.set_item("hardlinks", f.hardlinks)?;
    d.set_item("xattrs", f.xattrs)?;
    d.set_item("bytes", f.bytes)?;
    d.set_item(
        "image_bytes",
        r.plan.geometry.dblocks * u64::from(r.plan.geometry.blocksize),
    )?;
    d.set_item("seconds", r.elapsed.as_secs_f64())?;
    Ok(d.unbind())
}

/// Replays the log of `image` in place (as `xfskit recover`).
#[pyfunction]
#[pyo3(signature = (image, allow_unfinished_intents=false))]
fn recover(py: Python<'_>, image: PathBuf, allow_unfinished_intents: bool) -> PyResult<Py<PyDict>> {
    let r = py.detach(|| {
        let opts = xfskit::log::recover::RecoverOptions {
            allow_unfinished_intents,
            ..Default::default()
        };
        Fs::recover(&image, &opts).py()
    })?;
    let d = PyDict::new(py);
    d.set_item("was_clean", r.was_clean)?;
    d.set_item("head_block", r.head_blk)?;
    d.set_item("tail_block", r.tail_blk)?;
    d.set_item("records", r.records)?;
    d.set_item("sectors_written", r.sectors_written)?;
    Ok(d.unbind())
}

/// Repairs the filesystem in `image` (any image `open` takes), as
/// `xfskit repair` does; a dict of what was found, fixed and left.
#[pyfunction]
#[pyo3(signature = (image, dry_run=false, partition=None, lv=None, undo=None, zero_log=false))]
fn repair(
    py: Python<'_>,
    image: PathBuf,
    dry_run: bool,
    partition: Option<u32>,
    lv: Option<String>,
    undo: Option<PathBuf>,
    zero_log: bool,
) -> PyResult<Py<PyDict>> {
    let r = py.detach(|| {
        let img = xfskit::disk::open(
            &image,
            &ImageOptions {
                partition,
                lv,
                writable: !dry_run,
            },
        )
        .py()?;
        let dev: Box<dyn xfskit::dev::Device> = match &undo {
            Some(u) => Box::new(xfskit::dev::UndoDevice::create(img.device, u).py()?),
            None => img.device,
        };
        let opts = xfskit::repair::RepairOptions {
            dry_run,
            zero_log,
            ..Default::default()
        };
        xfskit::repair::repair(std::sync::Arc::from(dev), &opts).py()
    })?;
    let probs =
        |v: &[xfskit::check::Problem]| -> Vec<String> { v.iter().map(|p| p.to_string()).collect() };
    let d = PyDict::new(py);
    d.set_item("log", r.log.clone())?;
    let lost = match &r.log_lost {
        Some(l) => {
            let ld = PyDict::new(py);
            ld.set_item("transactions", l.transactions)?;
            ld.set_item("records", l.records)?;
            ld.set_item("uncommitted", l.uncommitted)?;
            ld.set_item("unfinished_intents", l.unfinished_intents)?;
            ld.set_item("items", l.items.clone())?;
            ld.set_item("unreadable", l.unreadable.clone())?;
            Some(ld)
        }
        None => None,
    };
    d.set_item("log_lost", lost)?;
    d.set_item("found", probs(&r.found))?;
    d.set_item("found_total", r.found_total)?;
    d.set_item("fixes", r.fixes.clone())?;
    d.set_item("remaining", probs(&r.remaining))?;
    d.set_item("unchecked", r.unchecked.clone())?;
    d.set_item(
        "clean",
        if dry_run {
            r.found_total == 0
        } else {
            r.is_clean()
        },
    )?;
    Ok(d.unbind())
}

/// Puts back what a write made with an undo file changed (`xfskit undo`).
#[pyfunction]
#[pyo3(signature = (undo, image, partition=None, lv=None, force=false))]
fn undo(
    py: Python<'_>,
    undo: PathBuf,
    image: PathBuf,
    partition: Option<u32>,
    lv: Option<String>,
    force: bool,
) -> PyResult<Py<PyDict>> {
    let r = py.detach(|| {
        let img = xfskit::disk::open(
            &image,
            &ImageOptions {
                partition,
                lv,
                writable: true,
            },
        )
        .py()?;
        xfskit::dev::undo::restore(
            &undo,
            img.device.as_ref(),
            &xfskit::dev::undo::RestoreOptions {
                dry_run: false,
                force,
            },
        )
        .py()
    })?;
    let d = PyDict::new(py);
    d.set_item("records", r.records)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("torn_tail", r.torn_tail)?;
    Ok(d.unbind())
}

#[pymodule]
fn _xfskit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CorruptError", py.get_type::<errors::CorruptError>())?;
    m.add("BULKSTAT_FIELDS", scan::FIELDS.to_vec())?;
    m.add_class::<PyFs>()?;
    m.add_class::<stat::StatResult>()?;
    m.add_class::<entry::DirEntry>()?;
    m.add_class::<file::Handle>()?;
    m.add_class::<scan::BulkstatIter>()?;
    m.add_class::<deleted::PyDeleted>()?;
    m.add_function(wrap_pyfunction!(open_path, m)?)?;
    m.add_function(wrap_pyfunction!(open_fileobj, m)?)?;
    m.add_function(wrap_pyfunction!(open_url, m)?)?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    m.add_function(wrap_pyfunction!(remote_stats, m)?)?;
    m.add_function(wrap_pyfunction!(mkfs, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(recover, m)?)?;
    m.add_function(wrap_pyfunction!(repair, m)?)?;
    m.add_function(wrap_pyfunction!(undo, m)?)?;
    Ok(())
}
