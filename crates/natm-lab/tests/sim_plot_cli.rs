//! `natm-lab sim-plot`: `natm sim`'s scenario with its arguments, drawn. The operator
//! binary prints the run (`natm sim --json`, `--series`) and draws nothing.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `natm` operator binary: cargo builds it beside `natm-lab` in the same target
/// directory (`cargo test --workspace` builds both; `cargo test -p natm-lab` alone
/// does not build it).
fn natm_exe() -> PathBuf {
    let lab = PathBuf::from(env!("CARGO_BIN_EXE_natm-lab"));
    let natm = lab
        .with_file_name("natm")
        .with_extension(std::env::consts::EXE_EXTENSION);
    assert!(
        natm.is_file(),
        "{} is missing: the `natm` binary is built by `cargo build -p natm-cli` or \
         `cargo test --workspace`, not by `cargo test -p natm-lab` alone",
        natm.display()
    );
    natm
}

fn run(exe: &std::path::Path, args: &[&str]) -> Output {
    Command::new(exe).args(args).output().expect("run")
}

const SCENARIO: [&str; 8] = [
    "--vcs",
    "2",
    "--sched",
    "rr",
    "--bytes",
    "2MB",
    "--interval",
    "5ms",
];

#[test]
fn sim_plot_draws_the_run_natm_sim_prints() {
    let dir = std::env::temp_dir().join(format!("natm-sim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("run.svg");
    let lab = PathBuf::from(env!("CARGO_BIN_EXE_natm-lab"));
    let mut args = vec!["sim-plot", "--plot", svg.to_str().unwrap()];
    args.extend(SCENARIO);
    let out = run(&lab, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).expect("the figure");
    assert!(text.contains("<svg"), "{text}");
    assert!(text.contains("bottleneck queue"), "the queue panel");
    std::fs::remove_dir_all(&dir).unwrap();

    // The same arguments run in `natm sim`, which prints the run and has no --plot.
    let natm = natm_exe();
    let mut args = vec!["sim", "--json"];
    args.extend(SCENARIO);
    let out = run(&natm, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["vcs"].as_array().map(Vec::len), Some(2), "{doc}");
    let out = run(&natm, &["sim", "--plot", "x.svg"]);
    assert!(!out.status.success());
}
