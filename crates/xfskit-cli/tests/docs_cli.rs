//! The documentation xfskit makes of itself: `xfskit manpages DIR` writes a
//! page for every subcommand `xfskit --help` lists, each of which man(1)
//! renders without a troff warning, and `xfskit manpages` alone puts them
//! where a plain `man xfskit-build` finds them; `xfskit completions bash` is
//! a script that bash loads (by itself, or through the bash-completion
//! package from the README's place) and that completes every subcommand.

mod common;

use common::fixtures::{output_text as text, xfskit_output as xfskit};

use common::TempDir;
use std::path::Path;
use std::process::Command;

/// The subcommands `xfskit --help` lists (its "Commands:" section), less
/// clap's own `help`.
fn subcommands() -> Vec<String> {
    let list = commands_of(&[]);
    for c in ["build", "extract", "cp", "manpages", "completions"] {
        assert!(
            list.iter().any(|x| x == c),
            "{c} not among the subcommands {list:?}"
        );
    }
    list
}

/// The subcommands the help of `xfskit PATH...` lists, less `help`.
fn commands_of(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let o = xfskit(&args);
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
    list
}

/// scripts/test.sh installs man-db; a machine without `man` must not pass
/// the man-page tests unseen.
fn need_man() {
    if let Some(t) = common::missing_tool(&["man"]) {
        panic!("`{t}` is missing: install man-db (scripts/test.sh does) to test the man pages");
    }
}

#[test]
fn manpages_for_every_subcommand_render_cleanly() {
    need_man();
    let tmp = TempDir::new("manpages");
    let dir = tmp.path().join("man1");
    let o = xfskit(&["manpages", &dir.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let mut pages = vec!["xfskit.1".to_string()];
    for c in subcommands() {
        pages.push(format!("xfskit-{c}.1"));
        // A subcommand's own subcommands (`xfskit db sb`) have pages too.
        pages.extend(
            commands_of(&[&c])
                .iter()
                .map(|sub| format!("xfskit-{c}-{sub}.1")),
        );
    }
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
    assert!(page.contains("BIN/../share/man/man1"), "{page}");
}

/// The README's install step: `xfskit manpages` without a directory puts
/// the pages beside the program, where a plain `man xfskit-build` finds
/// them for a program whose directory is in PATH (as ~/.cargo/bin is after
/// `cargo install`).
#[test]
fn manpages_without_dir_install_where_man_finds_them() {
    need_man();
    let tmp = TempDir::new("manpages-install");
    let bin = tmp.path().join("prefix/bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A program of its own in bin/ (the pages' place follows the program's
    // real path, so a symbolic link would not do).
    let exe = bin.join("xfskit");
    let built = env!("CARGO_BIN_EXE_xfskit");
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe).unwrap();
    }
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let o = Command::new(&exe)
        .arg("manpages")
        .env("PATH", &path)
        .env_remove("MANPATH")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let man1 = tmp.path().join("prefix/share/man/man1");
    let page = man1.join("xfskit-build.1");
    assert!(page.is_file(), "no {}: {}", page.display(), text(&o));
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(
        listed.lines().any(|l| Path::new(l) == page),
        "{} not listed:\n{listed}",
        page.display()
    );

    // man, given nothing but the page's name and this PATH, finds it.
    let man_here = |args: &[&str]| {
        man_command()
            .args(args)
            .env("PATH", &path)
            .env("HOME", tmp.path())
            .env_remove("MANPATH")
            .output()
            .expect("run man")
    };
    let o = man_here(&["-w", "xfskit-build"]);
    assert!(o.status.success(), "man -w xfskit-build: {}", text(&o));
    let found = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert_eq!(Path::new(&found), page, "man -w found another page");
    let o = man_here(&["xfskit-build"]);
    assert!(o.status.success(), "man xfskit-build: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    check_page(&out, "xfskit-build", "man xfskit-build");
    assert!(out.contains("--reproducible"), "man xfskit-build:\n{out}");
}

/// man, rendering 80 columns wide in a UTF-8 locale.
fn man_command() -> Command {
    let mut c = Command::new("man");
    c.env("MANWIDTH", "80").env("LC_ALL", "C.UTF-8");
    c
}

/// man's rendering of the page at `path` (80 columns, to a pipe).
fn man(path: &Path) -> String {
    let o = man_command()
        .arg("--warnings")
        .arg("-l")
        .arg(path)
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
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    check_page(&man(path), &name, &path.display().to_string());
}

/// Checks that `out`, man's rendering of `what`, has the NAME, SYNOPSIS and
/// DESCRIPTION sections and that its NAME section names `name`.
fn check_page(out: &str, name: &str, what: &str) {
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION"] {
        assert!(
            out.lines().any(|l| l == section),
            "{what}: no {section} section:\n{out}"
        );
    }
    // "NAME" then "       xfskit-cp - Copy files ..." (justified: any spaces).
    let line = out
        .lines()
        .skip_while(|l| *l != "NAME")
        .nth(1)
        .unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().take(2).collect();
    assert!(
        words == [name, "-"],
        "{what}: the NAME section does not name {name}:\n{out}"
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
    // TAB after a prefix gives the subcommands it begins, and the options
    // and values of a subcommand complete too.
    let setup = format!("source '{}'", file.display());
    let mut bu = complete(&setup, &[], &["xfskit", "bu"]);
    bu.sort();
    assert_eq!(bu, ["build", "bulkstat"]);
    let all = complete(&setup, &[], &["xfskit", ""]);
    for c in subcommands() {
        assert!(all.contains(&c), "{c} not completed: {all:?}");
    }
    let strict = complete(&setup, &[], &["xfskit", "extract", "--st"]);
    assert_eq!(strict, ["--strict"]);
    // (An empty word is offered the options too.)
    let mut shells = complete(&setup, &[], &["xfskit", "completions", ""]);
    shells.retain(|w| !w.starts_with('-'));
    shells.sort();
    assert_eq!(shells, ["bash", "fish", "zsh"]);

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

/// The completions bash offers for the command line `words` (the cursor at
/// the end of the last word) after running `setup`, in a bash with `env`.
fn complete(setup: &str, env: &[(&str, &str)], words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "{setup}\n\
         spec=$(complete -p xfskit) || exit 3\n\
         fn=${{spec##*-F }}; fn=${{fn%% *}}\n\
         COMP_WORDS=({words}); COMP_CWORD={cword}\n\
         COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}\n\
         \"$fn\" xfskit \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        cword = words.len() - 1,
    );
    let o = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .envs(env.iter().copied())
        .env_remove("XDG_DATA_HOME")
        .env_remove("BASH_COMPLETION_USER_DIR")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "completing {words:?}: {}\n{script}",
        text(&o)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The README's bash step: the script written to
/// ~/.local/share/bash-completion/completions/xfskit is loaded by the
/// bash-completion package the first time xfskit is completed.
#[test]
fn bash_completion_package_loads_the_installed_script() {
    let framework = Path::new("/usr/share/bash-completion/bash_completion");
    if !framework.is_file() {
        panic!(
            "{} is missing: install bash-completion (scripts/test.sh does) to test the README's step",
            framework.display()
        );
    }
    let tmp = TempDir::new("bash-completion");
    let home = tmp.path().display().to_string();
    let bin = Path::new(env!("CARGO_BIN_EXE_xfskit")).parent().unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let env = [("HOME", home.as_str()), ("PATH", path.as_str())];
    // The README's two lines, as a user's shell runs them.
    let o = Command::new("bash")
        .arg("-c")
        .arg(
            "set -e\nmkdir -p ~/.local/share/bash-completion/completions\n\
             xfskit completions bash > ~/.local/share/bash-completion/completions/xfskit",
        )
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // Nothing is registered until bash-completion's loader (its `complete
    // -D` function, which bash calls on the first TAB) finds the file.
    let setup = format!(
        "source {}\n! complete -p xfskit 2>/dev/null || exit 4\n\
         _completion_loader xfskit; [ $? = 124 ] || exit 5",
        framework.display()
    );
    let mut got = complete(&setup, &env, &["xfskit", "ext"]);
    got.sort();
    assert_eq!(got, ["extract"]);
}
