//! `natm-lab sim-plot`: `natm sim` with the same arguments, and the run drawn. The
//! operator binary prints the run (`natm sim --json`, `--series`) and draws nothing.

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
    let mut args = vec!["sim-plot", "--plot", svg.to_str().unwrap(), "--json"];
    args.extend(SCENARIO);
    let drawn = json(run(&lab, &args));
    let text = std::fs::read_to_string(&svg).expect("the figure");
    assert!(text.contains("<svg"), "{text}");
    assert!(text.contains("bottleneck queue"), "the queue panel");
    std::fs::remove_dir_all(&dir).unwrap();

    // `natm sim` with the same arguments prints the same run, and draws nothing.
    let natm = natm_exe();
    let mut args = vec!["sim", "--json"];
    args.extend(SCENARIO);
    let printed = json(run(&natm, &args));
    assert_eq!(
        printed["vcs"].as_array().map(Vec::len),
        Some(2),
        "{printed}"
    );
    assert_eq!(printed["vcs"], drawn["vcs"]);
    let out = run(&natm, &["sim", "--plot", "x.svg"]);
    assert!(!out.status.success());
}

fn json(out: Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}
