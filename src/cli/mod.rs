//! Subcommands of the `natm` binary. Each file parses its arguments with clap and
//! calls the library; none holds protocol logic of its own.
//!
//! The public modules are what the measurement lab (`natm-lab`) reuses: the commands
//! it spawns as processes (`sigd`, `switch`, `stat`) or runs before drawing (`sim`),
//! and the helpers both binaries need (tables, units, the loopback network, traffic
//! loops, [`outln!`](crate::outln)).

pub(crate) mod aal5;
pub(crate) mod cell;
pub(crate) mod demo;
pub(crate) mod ip;
pub(crate) mod ipc;
pub mod loopnet;
pub(crate) mod qos;
pub(crate) mod release;
pub mod sigd;
pub mod sim;
pub(crate) mod sim_net;
pub mod stat;
pub mod switch;
pub(crate) mod switch_demo;
pub mod table;
pub(crate) mod tools;
pub mod traffic;
pub mod units;

/// `println!` for command output: a closed pipe (`natm sim | head`) ends the program
/// quietly instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}
pub use crate::outln;

/// Errors a subcommand reports: a message for the user, exit status 1.
pub type CliResult = anyhow::Result<()>;
