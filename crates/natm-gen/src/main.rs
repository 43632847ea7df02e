//! `natm-gen`: writes the `natm` command's man pages and shell completions from its
//! clap definitions (`natm_cli::command`), for scripts/package.sh. A binary of its own
//! so that the operator's `natm` links neither clap_mangen nor clap_complete.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Command, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;

/// Writes natm's man pages and shell completions.
#[derive(Debug, Parser)]
#[command(name = "natm-gen", version = natm_cli::VERSION)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// One man page per command (section 1): natm.1, natm-sigd.1, natm-cell-encode.1, …
    Man {
        /// Directory to write them into (made if missing).
        dir: PathBuf,
    },
    /// Completion scripts: natm.bash, _natm (zsh), natm.fish.
    Completions {
        /// Directory to write them into (made if missing).
        dir: PathBuf,
        /// The shells to write for [default: bash, zsh and fish].
        #[arg(long = "shell", value_enum)]
        shells: Vec<ShellArg>,
    },
}

/// The shells the package ships completions for.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ShellArg {
    Bash,
    Zsh,
    Fish,
}

impl From<ShellArg> for Shell {
    fn from(s: ShellArg) -> Shell {
        match s {
            ShellArg::Bash => Shell::Bash,
            ShellArg::Zsh => Shell::Zsh,
            ShellArg::Fish => Shell::Fish,
        }
    }
}

fn make_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))
}

/// Man pages for `cmd` and each visible subcommand, recursively: clap_mangen's own
/// walk, which names a subcommand's page after its path (`natm-cell-encode.1`).
fn man(dir: &Path) -> anyhow::Result<()> {
    make_dir(dir)?;
    clap_mangen::generate_to(natm_cli::command(), dir)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))
}

/// `natm` without its hidden subcommands (the tests' `test-helper`): clap_complete
/// offers hidden subcommands too, and an operator's Tab should not. The root has no
/// arguments of its own beyond `--help` and `--version`, which clap adds again.
fn visible_command() -> Command {
    let full = natm_cli::command();
    let mut root = Command::new("natm")
        .version(natm_cli::VERSION)
        .subcommand_required(true)
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(about) = full.get_about() {
        root = root.about(about.clone());
    }
    root
}

fn completions(dir: &Path, shells: &[ShellArg]) -> anyhow::Result<()> {
    make_dir(dir)?;
    let all = [ShellArg::Bash, ShellArg::Zsh, ShellArg::Fish];
    let shells = if shells.is_empty() { &all[..] } else { shells };
    let mut cmd = visible_command();
    for &s in shells {
        clap_complete::generate_to(Shell::from(s), &mut cmd, "natm", dir)
            .with_context(|| format!("cannot write {s:?} completions into {}", dir.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = match Args::parse().what {
        What::Man { dir } => man(&dir),
        What::Completions { dir, shells } => completions(&dir, &shells),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "natm-gen: {e:#}");
            ExitCode::from(1)
        }
    }
}
