//! `natm-lab`: the measurement lab of natm, a binary of its own beside the `natm`
//! command operators install (issue 32). `natm-lab perf …` runs the experiments
//! (`natm-lab perf all --out DIR` the whole suite, with its report and figures);
//! `natm-lab sim-plot` draws a `natm sim` run.
//!
//! The lab reuses the operator code through the `natm_cli` library and never the
//! reverse. The experiments that need real processes spawn this executable: its
//! hidden `sigd`, `switch` and `stat` subcommands are `natm`'s own, so the lab runs
//! without a `natm` binary beside it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod perf;
mod plot;
mod sim_plot;

/// natm-lab — measure natm beside kernel TCP, UDP and QUIC, and draw the figures.
#[derive(Debug, Parser)]
#[command(name = "natm-lab", version = natm_cli::VERSION, about, long_about = None)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure natm beside kernel TCP, UDP and QUIC: the experiments of seed 000 §6 and
    /// seed 001 §8, one by one or all (`natm-lab perf all --out DIR`).
    #[command(subcommand)]
    Perf(perf::PerfCmd),
    /// Run `natm sim`'s single-bottleneck scenario (the same arguments) and draw
    /// per-VC rate, rate set or window, and the bottleneck queue over time.
    SimPlot(Box<sim_plot::SimPlotArgs>),
    /// `natm sigd`, for the networks of processes the experiments start.
    #[command(hide = true)]
    Sigd(natm_cli::cli::sigd::SigdArgs),
    /// `natm switch`, likewise.
    #[command(hide = true)]
    Switch(natm_cli::cli::switch::SwitchArgs),
    /// `natm stat`, with which the experiments wait for signalling links.
    #[command(hide = true)]
    Stat(natm_cli::cli::stat::StatArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Perf(c) => perf::run(c),
        Command::SimPlot(a) => sim_plot::run(&a),
        Command::Sigd(a) => natm_cli::cli::sigd::run(a),
        Command::Switch(a) => natm_cli::cli::switch::run(a),
        Command::Stat(a) => natm_cli::cli::stat::stat(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics when stderr is closed.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "natm-lab: {e:#}");
            ExitCode::from(1)
        }
    }
}
