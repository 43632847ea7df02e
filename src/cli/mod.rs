//! Subcommands of the `natm` binary. Each file parses its arguments with clap and
//! calls the library; none holds protocol logic of its own.

pub(crate) mod aal5;
pub(crate) mod cell;
pub(crate) mod demo;
pub(crate) mod ip;
pub(crate) mod ipc;
pub(crate) mod loopnet;
pub(crate) mod perf;
pub(crate) mod plot;
pub(crate) mod qos;
pub(crate) mod release;
pub(crate) mod sigd;
pub(crate) mod sim;
pub(crate) mod sim_net;
pub(crate) mod stat;
pub(crate) mod switch;
pub(crate) mod switch_demo;
pub(crate) mod table;
pub(crate) mod tools;
pub(crate) mod traffic;
pub(crate) mod units;

/// `println!` for command output: a closed pipe (`natm sim | head`) ends the program
/// quietly instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}
pub(crate) use outln;

/// Errors a subcommand reports: a message for the user, exit status 1.
pub(crate) type CliResult = anyhow::Result<()>;
