//! `xfskit manpages` and `xfskit completions`: documentation generated
//! from the command's own clap definitions, so it never disagrees with
//! `--help`.

use crate::cmd::out::outln;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use xfskit::Error;

/// The long help of `xfskit manpages`.
pub const MANPAGES_ABOUT: &str = concat!(
    "Write a manual page for xfskit and one for every subcommand into DIR (created \
if missing): xfskit.1, then xfskit-SUB.1 for each subcommand (xfskit-build.1, \
xfskit-cp.1, ...), with the same text as --help. Existing pages of the same names \
are replaced; the pages written are listed on standard output.\n\n",
    "Without DIR the pages go beside the xfskit program, into BIN/../share/man/man1 \
for the BIN directory that holds it (~/.cargo/share/man/man1 after `cargo install`, \
/usr/local/share/man/man1 for /usr/local/bin/xfskit). man(1) looks there for every \
BIN directory in PATH, so this is all the installing they need:\n",
    "  xfskit manpages\n",
    "  man xfskit-build\n\n",
    "(run mandb afterwards if `man -k xfskit` should find them too). To read one \
without installing: `man -l DIR/xfskit-extract.1`.\n\n\
Exit status: 0 on success, 4 if DIR cannot be made or written, 2 if DIR is not \
given and the program's directory has no parent."
);

/// The long help of `xfskit completions`.
pub const COMPLETIONS_ABOUT: &str = concat!(
    "Print the shell completion script for xfskit to standard output: subcommands, \
options and their values complete with TAB.\n\n",
    "To load it:\n",
    "  bash: mkdir -p ~/.local/share/bash-completion/completions\n",
    "        xfskit completions bash > ~/.local/share/bash-completion/completions/xfskit\n",
    "        (loaded by the bash-completion package when xfskit is first completed;\n",
    "        without it: source <(xfskit completions bash) in ~/.bashrc)\n",
    "  zsh:  xfskit completions zsh > ~/.zfunc/_xfskit\n",
    "        (with fpath+=~/.zfunc before compinit in ~/.zshrc)\n",
    "  fish: xfskit completions fish > ~/.config/fish/completions/xfskit.fish\n\n",
    "Exit status: 0 on success, 4 if standard output cannot be written."
);

/// Arguments of `xfskit manpages`.
#[derive(clap::Args)]
pub struct ManpagesArgs {
    /// The directory to write the pages into (created if missing); by
    /// default BIN/../share/man/man1 beside the xfskit program.
    pub dir: Option<PathBuf>,
}

/// Arguments of `xfskit completions`.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells completions are made for.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Shell {
    /// GNU bash.
    Bash,
    /// The Z shell.
    Zsh,
    /// The friendly interactive shell.
    Fish,
}

/// Writes the pages of `cli` (the whole command) into `a.dir`, or beside
/// the program without it.
pub fn manpages(a: ManpagesArgs, cli: clap::Command) -> Result<ExitCode, Error> {
    let dir = match a.dir {
        Some(dir) => dir,
        None => beside_program()?,
    };
    std::fs::create_dir_all(&dir).map_err(|e| at(&dir, e))?;
    // Built, every subcommand knows its full name ("xfskit cp") and its
    // page's name ("xfskit-cp"); `help` is no command of its own here.
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    let mut written = Vec::new();
    write_pages(&cli, &dir, &mut written)?;
    for p in &written {
        outln!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// BIN/../share/man/man1 for the BIN directory that holds this program: the
/// directory man-db searches for each directory of PATH.
fn beside_program() -> Result<PathBuf, Error> {
    let exe = std::env::current_exe().map_err(|e| at(Path::new("the xfskit program"), e))?;
    let prefix = exe.parent().and_then(Path::parent).ok_or_else(|| {
        Error::Invalid(format!(
            "{}: no directory above the program's to hold share/man; give DIR",
            exe.display()
        ))
    })?;
    Ok(prefix.join("share/man/man1"))
}

/// Writes the page of `cmd`, then those of its subcommands, recursively.
fn write_pages(cmd: &clap::Command, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let version = cmd.get_version().unwrap_or(env!("CARGO_PKG_VERSION"));
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("xfskit {version}"))
        .manual("xfskit manual");
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page).map_err(|e| at(&path, e))?;
    std::fs::write(&path, page).map_err(|e| at(&path, e))?;
    out.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, out)?;
    }
    Ok(())
}

/// Prints the completion script of `cli` for `a.shell`.
pub fn completions(a: CompletionsArgs, mut cli: clap::Command) -> Result<ExitCode, Error> {
    let shell = match a.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, "xfskit", &mut script);
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(&script).and_then(|()| stdout.flush()) {
        // A closed pipe ends quietly; other failures exit 4 at the end.
        crate::cmd::out::stdout_failed(e);
    }
    Ok(ExitCode::SUCCESS)
}

fn at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}
