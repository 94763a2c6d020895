//! The kit itself: a skip is appended to `$XFSKIT_SKIP_LOG`, and a
//! scratch directory is gone after its drop.

#[test]
fn skip_appends_its_line_and_scratch_is_removed() {
    let s = xfskit_testkit::Scratch::new("testkit-self");
    let log = s.join("skips");
    // The log scripts/test.sh set (if any) is put back after: these two
    // skips are the kit's own, not skipped tests.
    let outer = std::env::var_os("XFSKIT_SKIP_LOG");
    std::env::set_var("XFSKIT_SKIP_LOG", &log);
    xfskit_testkit::skip("one", "why one");
    xfskit_testkit::skip("two", "why two");
    match outer {
        Some(v) => std::env::set_var("XFSKIT_SKIP_LOG", v),
        None => std::env::remove_var("XFSKIT_SKIP_LOG"),
    }
    let text = std::fs::read_to_string(&log).expect("the skip log");
    assert_eq!(text, "SKIP one: why one\nSKIP two: why two\n");
    let dir = s.path().to_path_buf();
    std::fs::write(s.mkdir("a/b").join("f"), b"x").unwrap();
    drop(s);
    assert!(!dir.exists(), "{} is left", dir.display());
}
