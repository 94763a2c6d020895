//! The remote device's cache, merging, read-ahead and errors, over an
//! in-memory object store: every read equals the object's bytes, and the
//! requests counted are the ones the design promises.

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xfskit::dev::Device;
use xfskit_remote::{from_store, CacheOptions, RemoteDevice};

const CHUNK: u64 = 4096;

fn object(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4096) as u8).collect()
}

fn put(store: &InMemory, name: &str, data: Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(store.put(&Path::from(name), PutPayload::from(data)))
        .unwrap();
}

fn device(data: &[u8], cache_chunks: u64) -> (Arc<InMemory>, RemoteDevice) {
    let store = Arc::new(InMemory::new());
    put(&store, "disk.img", data.to_vec());
    let dev = from_store(
        store.clone(),
        Path::from("disk.img"),
        "mem://disk.img",
        CacheOptions {
            cache_bytes: cache_chunks * CHUNK,
            chunk_bytes: CHUNK,
        },
    )
    .unwrap();
    (store, dev)
}

fn read(dev: &RemoteDevice, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    dev.read_at(&mut b, off).unwrap();
    b
}

#[test]
fn reads_equal_the_object_and_repeat_from_the_cache() {
    let data = object(100_000);
    let (_s, dev) = device(&data, 64);
    assert_eq!(dev.len(), 100_000);
    assert_eq!(dev.stats().requests, 1, "the open's HEAD");
    // Unaligned, spanning chunks, and the short last chunk.
    for (off, len) in [
        (0u64, 10usize),
        (4000, 200),
        (10_000, 30_000),
        (99_990, 10),
        (0, 100_000),
    ] {
        assert_eq!(
            read(&dev, off, len),
            &data[off as usize..off as usize + len]
        );
    }
    let before = dev.stats();
    assert_eq!(read(&dev, 5000, 50_000), &data[5000..55_000]);
    let after = dev.stats();
    assert_eq!(after.requests, before.requests, "all cached");
    assert!(after.hits > before.hits);
}

#[test]
fn adjacent_misses_are_one_request() {
    let data = object(40 * CHUNK as usize);
    let (_s, dev) = device(&data, 64);
    assert_eq!(
        read(&dev, 100, 10 * CHUNK as usize),
        &data[100..100 + 10 * CHUNK as usize]
    );
    let s = dev.stats();
    assert_eq!(s.requests, 2, "HEAD + one GET of 11 chunks");
    assert_eq!(s.bytes, 11 * CHUNK);
}

#[test]
fn the_cache_keeps_its_size() {
    let data = object(64 * CHUNK as usize);
    let (_s, dev) = device(&data, 4);
    for c in 0..16u64 {
        assert_eq!(
            read(&dev, c * CHUNK, 10),
            &data[(c * CHUNK) as usize..(c * CHUNK) as usize + 10]
        );
    }
    assert_eq!(dev.stats().requests, 17);
    // The last 4 chunks stay; the first was dropped and is fetched again.
    read(&dev, 15 * CHUNK, 10);
    assert_eq!(dev.stats().requests, 17);
    read(&dev, 0, 10);
    assert_eq!(dev.stats().requests, 18);
}

#[test]
fn will_need_reads_ahead() {
    let data = object(64 * CHUNK as usize);
    let (_s, dev) = device(&data, 32);
    dev.will_need(8 * CHUNK, 8 * CHUNK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev.stats().bytes < 8 * CHUNK {
        assert!(Instant::now() < deadline, "read-ahead never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = dev.stats();
    assert_eq!(s.requests, 2);
    assert_eq!(
        read(&dev, 8 * CHUNK, 8 * CHUNK as usize),
        &data[8 * CHUNK as usize..16 * CHUNK as usize]
    );
    assert_eq!(dev.stats().requests, 2, "the read found it all");
    // Read-ahead fills at most half the cache (16 of its 32 chunks): of
    // 0..64 it asks for the 8 chunks before those held and the 8 after
    // them, in two requests, and for nothing past that bound.
    dev.will_need(0, 64 * CHUNK);
    // The chunks it asked for are claimed before `will_need` returns, so
    // these reads wait for its two requests instead of sending their own.
    assert_eq!(
        read(&dev, 0, 8 * CHUNK as usize),
        &data[..8 * CHUNK as usize]
    );
    assert_eq!(
        read(&dev, 16 * CHUNK, 8 * CHUNK as usize),
        &data[16 * CHUNK as usize..24 * CHUNK as usize]
    );
    let s = dev.stats();
    assert_eq!(s.requests, 4, "read-ahead sent two requests: {s:?}");
    assert_eq!(s.bytes, 8 * CHUNK + 16 * CHUNK, "{s:?}");
    // The first chunk past the bound was not asked for: reading it sends
    // a request for it alone. Had read-ahead gone on, the read would wait
    // for a longer request of the read-ahead's and more bytes would count.
    assert_eq!(
        read(&dev, 24 * CHUNK, 10),
        &data[24 * CHUNK as usize..24 * CHUNK as usize + 10]
    );
    let s = dev.stats();
    assert_eq!(s.requests, 5, "{s:?}");
    assert_eq!(s.bytes, 25 * CHUNK, "{s:?}");
}

#[test]
fn threads_share_fetches() {
    let data = Arc::new(object(256 * CHUNK as usize));
    let (_s, dev) = device(&data, 512);
    let dev = Arc::new(dev);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (dev, data) = (dev.clone(), data.clone());
            s.spawn(move || {
                for i in 0..64u64 {
                    let off = ((i * 7 + t) % 250) * CHUNK + t * 13;
                    let b = read(&dev, off, 3 * CHUNK as usize);
                    assert_eq!(b, &data[off as usize..off as usize + 3 * CHUNK as usize]);
                }
            });
        }
    });
    // Each chunk fetched once at most.
    assert!(dev.stats().bytes <= 256 * CHUNK, "{:?}", dev.stats());
}

#[test]
fn errors_name_the_object() {
    let data = object(10_000);
    let (store, dev) = device(&data, 8);
    let mut b = [0u8; 10];
    let e = dev.read_at(&mut b, 9_995).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("mem://disk.img"), "{e}");
    assert!(dev.read_at(&mut b, u64::MAX - 2).is_err());
    assert!(dev.write_at(&b, 0).is_err());
    // The object replaced after the open: its ETag no longer matches.
    put(&store, "disk.img", object(10_000));
    let e = dev.read_at(&mut b, 0).unwrap_err();
    assert!(e.to_string().contains("changed"), "{e}");
    // A missing object.
    let e = from_store(
        store,
        Path::from("none"),
        "mem://none",
        CacheOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("mem://none"), "{e}");
}
