//! The documentation xfskit makes of itself: `xfskit manpages DIR` writes a
//! page for every subcommand `xfskit --help` lists, each of which man(1)
//! renders without a troff warning; `xfskit completions bash` is a script
//! that bash loads and that names every subcommand.

mod common;

use common::fixtures::{output_text as text, xfskit_output as xfskit};

use common::TempDir;
use std::path::Path;
use std::process::Command;

/// The subcommands `xfskit --help` lists (its "Commands:" section), less
/// clap's own `help`.
fn subcommands() -> Vec<String> {
    let o = xfskit(&["--help"]);
    assert!(o.status.success(), "{}", text(&o));
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // Continuation lines of a long description are indented further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect();
    for c in ["build", "extract", "cp", "manpages", "completions"] {
        assert!(
            list.iter().any(|x| x == c),
            "{c} not among the subcommands {list:?} of:\n{help}"
        );
    }
    list
}

#[test]
fn manpages_for_every_subcommand_render_cleanly() {
    // scripts/test.sh installs man-db; a machine without man must not
    // pass this test unseen.
    if let Some(t) = common::missing_tool(&["man"]) {
        panic!("`{t}` is missing: install man-db (scripts/test.sh does) to test the man pages");
    }
    let tmp = TempDir::new("manpages");
    let dir = tmp.path().join("man1");
    let o = xfskit(&["manpages", &dir.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let mut pages = vec!["xfskit.1".to_string()];
    pages.extend(subcommands().iter().map(|c| format!("xfskit-{c}.1")));
    for page in &pages {
        let path = dir.join(page);
        assert!(
            path.is_file(),
            "no page {page}; manpages said:\n{}",
            text(&o)
        );
        render(&path);
    }
    // Listed on stdout, and nothing else written.
    let listed = String::from_utf8_lossy(&o.stdout).lines().count();
    let made = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(listed, made, "{}", text(&o));
    assert_eq!(made, pages.len(), "pages {pages:?}");

    // The text of --help is what the pages say.
    let page = man(&dir.join("xfskit-extract.1"));
    assert!(page.contains("--strict"), "{page}");
    assert!(page.contains("incomplete"), "{page}");
    let page = man(&dir.join("xfskit-manpages.1"));
    assert!(
        page.contains("xfskit manpages /usr/local/share/man/man1"),
        "{page}"
    );
}

/// man's rendering of the page at `path` (80 columns, to a pipe).
fn man(path: &Path) -> String {
    let o = Command::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(path)
        .env("MANWIDTH", "80")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .expect("run man");
    assert!(
        o.status.success(),
        "man -l {}: {}",
        path.display(),
        text(&o)
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.trim().is_empty(),
        "man -l {}: troff warnings:\n{stderr}",
        path.display()
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Renders a page and checks its sections.
fn render(path: &Path) {
    let out = man(path);
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION"] {
        assert!(
            out.lines().any(|l| l == section),
            "{}: no {section} section:\n{out}",
            path.display()
        );
    }
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    // "NAME" then "       xfskit-cp - Copy files ..." (justified: any spaces).
    let line = out
        .lines()
        .skip_while(|l| *l != "NAME")
        .nth(1)
        .unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().take(2).collect();
    assert!(
        words == [name.as_str(), "-"],
        "{}: the NAME section does not name {name}:\n{out}",
        path.display()
    );
}

#[test]
fn bash_completion_loads_and_knows_every_subcommand() {
    if let Some(t) = common::missing_tool(&["bash"]) {
        panic!("`{t}` is missing");
    }
    let tmp = TempDir::new("completions");
    let o = xfskit(&["completions", "bash"]);
    assert!(o.status.success(), "{}", text(&o));
    let script = String::from_utf8_lossy(&o.stdout).into_owned();
    let file = tmp.path().join("xfskit.bash");
    std::fs::write(&file, &script).unwrap();
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && complete -p xfskit", file.display()))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "bash: {}", text(&o));
    assert!(
        out.starts_with("complete ") && out.trim_end().ends_with(" xfskit"),
        "xfskit's completion is not registered: {}",
        text(&o)
    );
    for c in subcommands() {
        assert!(
            script.contains(&format!("xfskit,{c})")),
            "the bash completion does not know {c}"
        );
    }
    // Options of a subcommand complete too.
    assert!(script.contains("--strict"), "no --strict in the script");

    // zsh and fish scripts are made (their shells may not be here).
    for shell in ["zsh", "fish"] {
        let o = xfskit(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", text(&o));
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            s.contains("extract") && s.contains("manpages"),
            "{shell}:\n{s}"
        );
    }
    // Any other shell is a usage error.
    let o = xfskit(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
