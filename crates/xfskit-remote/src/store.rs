//! From a URL to an object store, the object's path in it, and a
//! [`RemoteDevice`] over the object.

use crate::device::{CacheOptions, Counters, RemoteDevice};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjPath;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreScheme};
use std::io;
use std::sync::Arc;
use url::Url;
use xfskit::error::{Error, Result};

/// URL schemes read through object storage.
const SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https",
];

/// True when `name` is a URL this crate opens (rather than a local path).
pub fn is_url(name: &str) -> bool {
    name.split_once("://")
        .is_some_and(|(s, _)| SCHEMES.contains(&s.to_ascii_lowercase().as_str()))
}

fn invalid(url: &str, what: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("{url}: {what}"))
}

/// Applies `options` to a builder, refusing keys it does not know.
fn apply<B, K: std::str::FromStr>(
    url: &str,
    mut b: B,
    options: &[(String, String)],
    set: impl Fn(B, K, &str) -> B,
) -> Result<B> {
    for (k, v) in options {
        let key = k
            .to_ascii_lowercase()
            .parse::<K>()
            .map_err(|_| invalid(url, format!("unknown storage option {k:?}")))?;
        b = set(b, key, v);
    }
    Ok(b)
}

/// The store holding `url`'s object, configured from the environment and
/// then from `options`, and the object's path in it.
fn store_of(url: &str, options: &[(String, String)]) -> Result<(Arc<dyn ObjectStore>, ObjPath)> {
    let u = Url::parse(url).map_err(|e| invalid(url, e))?;
    let (scheme, path) = ObjectStoreScheme::parse(&u).map_err(|e| invalid(url, e))?;
    let path = ObjPath::from_url_path(path.as_ref()).map_err(|e| invalid(url, e))?;
    if path.as_ref().is_empty() {
        return Err(invalid(url, "the URL names no object"));
    }
    let built: std::result::Result<Arc<dyn ObjectStore>, object_store::Error> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let b = apply(
                url,
                AmazonS3Builder::from_env().with_url(url),
                options,
                |b, k, v| b.with_config(k, v),
            )?;
            b.build().map(|s| Arc::new(s) as _)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let b = apply(
                url,
                GoogleCloudStorageBuilder::from_env().with_url(url),
                options,
                |b, k, v| b.with_config(k, v),
            )?;
            b.build().map(|s| Arc::new(s) as _)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let b = apply(
                url,
                MicrosoftAzureBuilder::from_env().with_url(url),
                options,
                |b, k, v| b.with_config(k, v),
            )?;
            b.build().map(|s| Arc::new(s) as _)
        }
        ObjectStoreScheme::Http => {
            let base = &u[..url::Position::BeforePath];
            // An http:// URL asks for plain HTTP: object_store refuses it
            // unless allowed.
            let plain = u.scheme().eq_ignore_ascii_case("http");
            let start = HttpBuilder::new()
                .with_url(base)
                .with_config(ClientConfigKey::AllowHttp, plain.to_string());
            let b = apply(url, start, options, |b, k, v| b.with_config(k, v))?;
            b.build().map(|s| Arc::new(s) as _)
        }
        _ => return Err(invalid(url, "not an object storage or HTTP URL")),
    };
    let store = built.map_err(|e| invalid(url, e))?;
    Ok((store, path))
}

/// The URL of the backing file `name` that the qcow2 file at `url` names:
/// resolved against the URL's directory as a relative link is (`base.img`,
/// `../bases/base.img`). A name that is itself a URL must point into the
/// same store (scheme, bucket or host, port). A name starting with `/` is a
/// path on the machine that made the image, which a URL cannot reach: it is
/// refused, as are other schemes (`file:`, `json:`...), so that an image
/// read from a URL never reads local files or other servers.
pub fn backing_url(url: &str, name: &str) -> Result<String> {
    let refuse = |why: &str| {
        Error::Unsupported(format!(
            "backing file {name:?} of {url}: {why}; only names relative to the image's URL \
             (or URLs into the same store) are followed"
        ))
    };
    if name.starts_with('/') || name.starts_with('\\') {
        return Err(refuse(
            "an absolute path on the machine that made the image",
        ));
    }
    let base = Url::parse(url).map_err(|e| invalid(url, e))?;
    let joined = base.join(name).map_err(|e| refuse(&e.to_string()))?;
    let same = joined.scheme() == base.scheme()
        && joined.host_str() == base.host_str()
        && joined.port_or_known_default() == base.port_or_known_default();
    if !same {
        return Err(refuse("it is not in the same store"));
    }
    if joined.query().is_some() || joined.fragment().is_some() {
        return Err(refuse("it has a query or fragment"));
    }
    Ok(joined.to_string())
}

/// Opens the object at `url` as a read-only device (one HEAD request for
/// its size).
pub fn open_device(
    url: &str,
    options: &[(String, String)],
    cache: CacheOptions,
) -> Result<RemoteDevice> {
    let (store, path) = store_of(url, options)?;
    from_store(store, path, url, cache)
}

/// A device over the object at `path` in `store` (any object_store
/// implementation; `name` names it in errors).
pub fn from_store(
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    name: &str,
    cache: CacheOptions,
) -> Result<RemoteDevice> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("xfskit-remote")
        .enable_all()
        .build()?;
    let counters = Counters::new_const();
    let head = {
        let store = store.clone();
        let path = path.clone();
        let h = rt.spawn(async move { store.head(&path).await });
        futures::executor::block_on(h).map_err(io::Error::other)?
    };
    counters.request(0);
    let meta = head.map_err(|e| {
        let kind = match e {
            object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
            _ => io::ErrorKind::Other,
        };
        Error::Io(io::Error::new(kind, format!("{name}: {e}")))
    })?;
    Ok(RemoteDevice::new(
        rt,
        store,
        path,
        name.to_string(),
        meta,
        cache,
        counters,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        assert!(is_url("s3://bucket/disk.img"));
        assert!(is_url("HTTPS://example.com/disk.qcow2"));
        assert!(is_url("gs://b/o"));
        assert!(is_url("az://container/o"));
        assert!(!is_url("/tmp/disk.img"));
        assert!(!is_url("disk.img"));
        assert!(!is_url("ftp://example.com/disk.img"));
        assert!(!is_url("./s3:/x"));
    }

    #[test]
    fn backing_names_resolve_against_the_url() {
        let ok = |u: &str, n: &str| backing_url(u, n).unwrap();
        assert_eq!(
            ok("s3://b/vms/top.qcow2", "base.img"),
            "s3://b/vms/base.img"
        );
        assert_eq!(
            ok("s3://b/vms/a/top.qcow2", "../bases/base.qcow2"),
            "s3://b/vms/bases/base.qcow2"
        );
        assert_eq!(
            ok("http://127.0.0.1:8000/d/top.qcow2", "sub/base.raw"),
            "http://127.0.0.1:8000/d/sub/base.raw"
        );
        assert_eq!(
            ok("https://h/d/top.qcow2", "https://h/other/base.img"),
            "https://h/other/base.img"
        );
        // Never above the bucket, whatever the dots.
        assert_eq!(ok("gs://b/top.qcow2", "../../../x.img"), "gs://b/x.img");
        let no = |u: &str, n: &str| backing_url(u, n).err().unwrap().to_string();
        assert!(no("s3://b/top.qcow2", "/var/lib/base.img").contains("absolute path"));
        assert!(no("s3://b/top.qcow2", "s3://other/base.img").contains("same store"));
        assert!(no("http://h:1/top.qcow2", "http://h:2/base.img").contains("same store"));
        assert!(no("http://h/top.qcow2", "file:///etc/passwd").contains("same store"));
        assert!(no("http://h/top.qcow2", "json:{\"file\":1}").contains("same store"));
    }

    #[test]
    fn refuses_unknown_options_and_bare_buckets() {
        let o = vec![("no_such_key".to_string(), "1".to_string())];
        let e = store_of("s3://bucket/disk.img", &o)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown storage option"), "{e}");
        let e = store_of("s3://bucket", &[]).err().unwrap().to_string();
        assert!(e.contains("names no object"), "{e}");
    }
}
