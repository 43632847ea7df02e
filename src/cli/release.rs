//! `natm release CALL`: end a call as an administrator (root, or the user whose
//! application holds it). sigd releases both ends with the cause given.

use std::path::PathBuf;

use clap::Args;
use natm::wire::ipc::Message;
use natm::wire::q2931::CauseValue;

use super::{ipc, outln, CliResult};

/// `natm release`: end a call through the host's sigd.
#[derive(Debug, Args)]
#[command(after_long_help = RELEASE_HELP)]
pub(crate) struct ReleaseArgs {
    /// The call's id as `natm stat` shows it (16 hex digits; a leading 0x is allowed).
    call: String,
    /// UNI cause both ends are given (Q.2931 Table 4-3, 1 to 127): 16 normal
    /// clearing, 31 normal unspecified, 41 temporary failure...
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u8).range(1..=127))]
    cause: u8,
    /// sigd's socket [default: $NATM_SIGD, else /run/natm/sigd.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
}

const RELEASE_HELP: &str = "\
Who may: root, or the user whose application holds the call; anyone else is refused
(\"permission denied: call … belongs to uid 1000\"), exit status 1. sigd sends RELEASE
with the cause to the peer and tells the local application, whose connection then
ends: closed in order for causes 16 and 31 (Q.2931's normal clearing; data already
sent still arrives), aborted for any other cause.

Examples:
  natm stat                                   # find the call's id
  natm release 5f3a09c2d4e1b807               # normal clearing (cause 16)
  natm release 5f3a09c2d4e1b807 --cause 41    # temporary failure: both ends abort";

fn parse_call(s: &str) -> anyhow::Result<u64> {
    let hex = s.trim().trim_start_matches("0x");
    u64::from_str_radix(hex, 16).map_err(|_| {
        anyhow::anyhow!("\"{s}\" is not a call id: give the 16 hex digits `natm stat` shows")
    })
}

pub(crate) fn run(a: ReleaseArgs) -> CliResult {
    let call = parse_call(&a.call)?;
    let path = ipc::socket_path(a.socket);
    let m = Message::AdminRelease {
        req: 1,
        call,
        cause: a.cause,
    };
    let meaning = CauseValue::from_raw(a.cause).meaning();
    match ipc::ask(&path, &m)? {
        Message::Ack { .. } => {
            outln!("released call {call:016x} (cause {}, {meaning})", a.cause);
            Ok(())
        }
        Message::Refused { cause, detail, .. } => Err(anyhow::anyhow!(
            "{detail} (cause {cause}, {})",
            CauseValue::from_raw(cause).meaning()
        )),
        other => Err(anyhow::anyhow!("sigd answered {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_hex_as_stat_shows_them() {
        assert_eq!(parse_call("000000000000007b").unwrap(), 123);
        assert_eq!(parse_call("0x7B").unwrap(), 123);
        assert!(parse_call("call-7").is_err());
    }
}
