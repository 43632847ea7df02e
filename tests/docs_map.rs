//! docs/ARCHITECTURE.md is a map of the code as it is (issue 32): these checks fail when
//! it drifts — its length, the crate graph and the crate count it states, the lock
//! hierarchy it lists, and every repository path it names. Offline and fast: files are
//! read with `std::fs`, the crate facts come from `cargo metadata` and `cargo tree`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const MAX_LINES: usize = 800;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md")
}

fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo's output is UTF-8")
}

/// The lines of the section whose `## ` heading starts with `title`.
fn section<'a>(doc: &'a str, title: &str) -> Vec<&'a str> {
    doc.lines()
        .skip_while(|l| !l.starts_with(&format!("## {title}")))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect()
}

/// The backticked spans of `text`, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn architecture_is_at_most_800_lines() {
    let n = architecture().lines().count();
    assert!(
        n <= MAX_LINES,
        "docs/ARCHITECTURE.md has {n} lines; the map is kept to {MAX_LINES} \
         (reference material goes to its own doc, history to docs/decisions/)"
    );
}

/// The variants of `enum Level` in crates/natm/src/sync.rs, in declaration order,
/// parsed from the source text (doc comments and attributes skipped).
fn lock_levels() -> Vec<String> {
    let src = std::fs::read_to_string(root().join("crates/natm/src/sync.rs")).expect("sync.rs");
    let start = src.find("enum Level {").expect("`enum Level {` in sync.rs");
    let body = &src[start + "enum Level {".len()..];
    let body = &body[..body.find('}').expect("the end of enum Level")];
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with("#["))
        .map(|l| l.trim_end_matches(',').to_string())
        .collect()
}

#[test]
fn the_lock_hierarchy_lists_every_level_in_order() {
    let doc = architecture();
    let listed: Vec<String> = section(&doc, "The lock hierarchy")
        .into_iter()
        .filter_map(|l| {
            // Table rows `| n | `Level` | … |`: the level is the row's first backticked span.
            let cells: Vec<&str> = l.strip_prefix('|')?.split('|').map(str::trim).collect();
            cells.first()?.parse::<usize>().ok()?;
            backticked(cells.get(1)?).first().map(|s| s.to_string())
        })
        .collect();
    let levels = lock_levels();
    assert!(!levels.is_empty(), "no variants parsed from enum Level");
    assert_eq!(
        listed, levels,
        "docs/ARCHITECTURE.md \"The lock hierarchy\" must list sync::Level's variants in order"
    );
}

/// Every workspace member's package name (`cargo metadata --no-deps`).
fn workspace_members() -> Vec<String> {
    let meta = cargo(&[
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
        "--offline",
    ]);
    let meta: serde_json::Value = serde_json::from_str(&meta).expect("cargo metadata's JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("a package name").to_string())
        .collect()
}

#[test]
fn the_crate_graph_names_every_workspace_member() {
    let doc = architecture();
    let graph: String = section(&doc, "Crates")
        .into_iter()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n");
    let words: BTreeSet<&str> = graph
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .collect();
    let members = workspace_members();
    assert!(members.len() >= 8, "members: {members:?}");
    for m in &members {
        assert!(
            words.contains(m.as_str()),
            "workspace member {m} is missing from the crate graph in docs/ARCHITECTURE.md"
        );
    }
}

/// How many packages an application that links `natm` builds: the dependency closure
/// of `natm` with its default features, normal dependencies only (no build or dev
/// dependencies), for the host target — `cargo tree -p natm -e normal --prefix none`,
/// each package counted once (a repeated subtree is printed with a trailing `(*)`).
/// `natm` and `natm-proto` are counted; proc-macro crates and their dependencies too.
fn crates_an_application_builds() -> usize {
    let tree = cargo(&[
        "tree",
        "-p",
        "natm",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--offline",
    ]);
    tree.lines()
        .map(|l| l.trim().trim_end_matches("(*)").trim())
        .filter(|l| !l.is_empty())
        .collect::<BTreeSet<_>>()
        .len()
}

#[test]
fn the_crate_count_an_application_links_is_cargos() {
    let doc = architecture().replace('\n', " ");
    let marker = "An application that links `natm` builds ";
    let at = doc
        .find(marker)
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md should say {marker:?}N crates"));
    let rest = &doc[at + marker.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    assert!(
        rest[digits.len()..].starts_with(" crates"),
        "expected \"{marker}N crates\", found {:?}",
        &rest[..rest.len().min(40)]
    );
    let stated: usize = digits.parse().expect("a number");
    let counted = crates_an_application_builds();
    assert_eq!(
        stated, counted,
        "docs/ARCHITECTURE.md says an application that links natm builds {stated} crates; \
         cargo tree -p natm -e normal counts {counted}"
    );
}

/// Whether `s` looks like a path inside the repository (the doc's own convention:
/// `crates/…`, `src/…`, `docs/…`, `tests/…`, `scripts/…`).
fn repo_path(s: &str) -> bool {
    ["crates/", "src/", "docs/", "tests/", "scripts/"]
        .iter()
        .any(|p| s.starts_with(p))
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./*".contains(c))
}

#[test]
fn every_path_the_map_names_exists() {
    let doc = architecture();
    let mut missing = Vec::new();
    let mut checked = 0;
    for span in backticked(&doc) {
        if !repo_path(span) {
            continue;
        }
        // A glob (`docs/perf/*.json`) names its directory.
        let path = match span.find('*') {
            Some(i) => &span[..span[..i].rfind('/').map_or(0, |j| j + 1)],
            None => span,
        };
        checked += 1;
        if !Path::new(&root().join(path)).exists() {
            missing.push(span);
        }
    }
    // Decision records and docs named in the prose, without backticks, too.
    for word in doc.split(|c: char| c.is_whitespace() || c == '(' || c == ',') {
        let word = word.trim_end_matches(['.', ',', ')', ';', ':']);
        if word.starts_with("docs/") && word.ends_with(".md") {
            checked += 1;
            if !root().join(word).exists() {
                missing.push(word);
            }
        }
    }
    assert!(checked > 20, "only {checked} paths found");
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_decision_record_the_map_names_exists() {
    let doc = architecture();
    let index = section(&doc, "Decision records");
    let mut names = 0;
    for row in index.iter().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.get(1).and_then(|c| c.parse::<u32>().ok()).is_none() {
            continue;
        }
        for name in cells[2].split(", ") {
            names += 1;
            let p = root().join("docs/decisions").join(format!("{name}.md"));
            assert!(
                p.exists(),
                "docs/ARCHITECTURE.md names {name}, not in docs/decisions/"
            );
        }
    }
    let on_disk = std::fs::read_dir(root().join("docs/decisions"))
        .expect("docs/decisions")
        .count();
    assert_eq!(
        names, on_disk,
        "the index of docs/ARCHITECTURE.md should name every record in docs/decisions/"
    );
}
