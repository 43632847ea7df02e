//! The commit `natm --version` names: `git rev-parse --short HEAD` at build time,
//! "unknown" without git or a repository (a source tarball, a crate download).
//!
//! Rebuilt only when HEAD moves: the script watches HEAD and the ref it points at
//! (where git keeps them, which in a worktree is outside this directory), never the
//! working tree, so an edit rebuilds no more than it did before.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=NATM_GIT_COMMIT={commit}");
    if commit == "unknown" {
        return;
    }
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut watch = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(r) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]) {
        if r.starts_with("refs/") {
            watch.push(r);
        }
    }
    for w in watch {
        // Only files that exist: cargo reruns a script whose watched file is missing
        // on every build.
        if let Some(p) = git(&["rev-parse", "--git-path", &w]).map(|p| root.join(p)) {
            if p.is_file() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
}
