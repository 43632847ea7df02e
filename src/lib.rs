//! The `natm` command operators install: one subcommand per job ([`main`] is the
//! binary's whole body), and the pieces of it the measurement lab (`natm-lab`, in
//! crates/natm-lab) reuses: tables, units, the loopback network of processes, the
//! traffic loops, and the `sigd`, `switch`, `stat` and `sim` commands it runs. The
//! arrow goes one way: the lab depends on this crate, never the reverse.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod cli;

/// The version both binaries print: the package's, and the commit built (`git rev-parse
/// --short HEAD` at build time, "unknown" outside a repository; build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NATM_GIT_COMMIT"),
    ")"
);

/// natm — a native-mode ATM protocol stack in user space.
#[derive(Debug, Parser)]
#[command(
    name = "natm",
    version = VERSION,
    about,
    long_about = None
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the stack end to end: three VCs of different service classes at once.
    Demo(cli::demo::DemoArgs),
    /// Encode or decode a 5-byte ATM cell header (UNI), with HEC.
    #[command(subcommand)]
    Cell(cli::cell::CellCmd),
    /// Segment a payload into AAL5 cells, or reassemble cells into a payload.
    #[command(subcommand)]
    Aal5(cli::aal5::Aal5Cmd),
    /// Parse and print QoS in Linux-ATM text syntax.
    #[command(subcommand)]
    Qos(cli::qos::QosCmd),
    /// Run one scenario through the deterministic network simulator.
    ///
    /// Goodput is a VC's application bytes delivered over the time it ran: from its
    /// start until both ends finished (or the end of the run); lost bytes take time
    /// and count for nothing. A guaranteed VC that loses one TPDU of a message loses
    /// the whole message (it has no error control).
    Sim(Box<cli::sim::SimArgs>),
    /// The signalling daemon: one per host; sets calls up and down for applications,
    /// admits guaranteed VCs, cleans up after applications that die.
    Sigd(cli::sigd::SigdArgs),
    /// One ATM switch: ports over UDP in cell or frame mode, permanent VCs and VPs.
    Switch(cli::switch::SwitchArgs),
    /// Show what the host's sigd holds: calls with their traffic, VCIs, reservations,
    /// free capacity (`--watch` for a live view); or a switch's ports and VCs
    /// (`--switch FILE`).
    Stat(cli::stat::StatArgs),
    /// End a call as an administrator (root, or the user owning it): both ends are
    /// released with the cause given.
    Release(cli::release::ReleaseArgs),
    /// Call ADDR[:SAP] through sigd and send stdin, a file or generated load.
    Call(cli::tools::call::CallArgs),
    /// Answer calls on a SAP: data to stdout or a file, discarded, or echoed.
    Listen(cli::tools::listen::ListenArgs),
    /// Round-trip probes to an echo listener (`natm listen echo --echo`).
    Ping(cli::tools::ping::PingArgs),
    /// Capture natm's UDP traffic on an interface as ATM, for Wireshark (root).
    Capture(cli::tools::capture::CaptureArgs),
    /// IP over natm: a TUN interface (natm0) whose packets ride VCs set up on demand,
    /// with ATMARP (RFC 2225) and a QoS policy per flow.
    Ip(cli::ip::IpArgs),
    /// A child process for the multi-process tests.
    #[command(hide = true)]
    TestHelper(cli::sigd::HelperArgs),
}

/// The `natm` command's clap definition: what its man pages and shell completions are
/// generated from (crates/natm-gen), so they name exactly the flags the binary takes.
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// The `natm` binary: parses the command line, runs the subcommand, reports its error.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Demo(a) => cli::demo::run(a),
        Command::Cell(c) => cli::cell::run(c),
        Command::Aal5(c) => cli::aal5::run(c),
        Command::Qos(c) => cli::qos::run(c),
        Command::Sim(a) => cli::sim::run(*a),
        Command::Sigd(a) => cli::sigd::run(a),
        Command::Switch(a) => cli::switch::run(a),
        Command::Stat(a) => cli::stat::stat(a),
        Command::Release(a) => cli::release::run(a),
        Command::Call(a) => cli::tools::call::run(a),
        Command::Listen(a) => cli::tools::listen::run(a),
        Command::Ping(a) => cli::tools::ping::run(a),
        Command::Capture(a) => cli::tools::capture::run(a),
        Command::Ip(a) => cli::ip::run(a),
        Command::TestHelper(a) => cli::sigd::helper(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics when stderr is closed.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "natm: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn version_names_the_commit_built() {
        let v = Args::command().render_version();
        let commit = env!("NATM_GIT_COMMIT");
        assert_eq!(
            v.trim(),
            format!("natm {} (commit {commit})", env!("CARGO_PKG_VERSION"))
        );
        // Built from a repository: the commit checked out now (the build script
        // reruns when HEAD moves).
        let now = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        match now {
            Some(now) => assert_eq!(commit, now),
            None => assert_eq!(commit, "unknown"),
        }
    }

    #[test]
    fn release_cause_is_a_q2931_cause() {
        let parse =
            |c: &str| Args::try_parse_from(["natm", "release", "0123456789abcdef", "--cause", c]);
        for good in ["1", "16", "127"] {
            assert!(parse(good).is_ok(), "{good}");
        }
        for bad in ["0", "128", "255", "256"] {
            let e = parse(bad).expect_err(bad).to_string();
            assert!(e.contains("1..=127"), "{bad}: {e}");
        }
    }
}
