//! Switched VCs between Linux's ATM stack and natm (issue 15): Linux's `atmsigd`, in a
//! QEMU guest, runs the user side of UNI over an atmtcp link to a `natm switch` port
//! with `signalling = "uni"`; a natm host's sigd is attached to another port of the
//! same switch. Calls go both ways in each UNI variant atmsigd offers. The guest is
//! prepared once and cached (scripts/linuxatm/prepare.sh); the test skips only where
//! that cannot be done.

#[path = "linuxatm/support.rs"]
mod guest;
mod sigd_support;
mod switch_support;

use std::time::Duration;

use sigd_support::{free_port, Sigd, LINK};
use switch_support::SwitchProc;

const GUEST: Duration = Duration::from_secs(90);
const STEP: Duration = Duration::from_secs(30);

/// The guest's address and the natm host's.
const LINUX: &str = "47.0005.80ffe1000000f21a26d8.0020ea000ee0.00";
const NATM: &str = "47.0005.80ffe1000000f21a26d8.0020ea000ee1.00";
/// An address the switch has no route for.
const NOWHERE: &str = "47.0005.80ffe1000000f21a26d8.0020ea0000ff.00";

fn ready() -> bool {
    match guest::prepare() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED: this machine cannot run the Linux-ATM guest: {why}");
            false
        }
    }
}

/// One switch with the guest's atmtcp port and a natm host's port, and the host's
/// sigd attached to it.
struct Net {
    sw: SwitchProc,
    host: Sigd,
}

impl Net {
    fn new(name: &str) -> Net {
        let (sig, sw_port) = (free_port(), free_port());
        let sw = SwitchProc::start(
            name,
            &format!(
                "[[port]]\nname = \"linux\"\nmode = \"atmtcp\"\nlisten = \"127.0.0.1:0\"\n\
                 signalling = \"uni\"\n\
                 [[port]]\nname = \"h\"\nmode = \"frame\"\nbind = \"{sw_port}\"\npeer = \"{sig}\"\n\
                 line_rate = 100000000\nsignalling = \"host\"\n\
                 [[route]]\nprefix = \"47.0005.80ffe1000000f21a26d8.0020ea000ee0\"\nport = \"linux\"\n\
                 [[route]]\nprefix = \"47.0005.80ffe1000000f21a26d8.0020ea000ee1\"\nport = \"h\"\n"
            ),
        );
        let host = Sigd::start_at(
            &format!(
                "addresses = [\"{NATM}\"]\n{LINK}\n[[directory]]\nprefix = \"*\"\n\
                 peer = \"{sw_port}\"\nswitch = true\n"
            ),
            sig,
        );
        Net { sw, host }
    }

    fn boot(&self, uni: &str, mode: &str, args: &[(&str, String)]) -> guest::Guest {
        let mut all = vec![
            ("port", self.sw.ports["linux"].port().to_string()),
            ("addr", LINUX.to_string()),
            ("uni", uni.to_string()),
            ("mode", mode.to_string()),
        ];
        all.extend(args.iter().cloned());
        let mut g = guest::Guest::boot("svc", &all);
        let up = g.marker("sigd up", GUEST);
        assert!(up.is_empty(), "{up}\n{}", g.console());
        g
    }
}

/// atmsigd's SETUP through the switch is refused with the cause the refusing side
/// gave — natm's sigd when nobody listens, the switch when it has no route — and
/// `svc_send` sees the refusal at once; in every UNI variant.
#[test]
fn refusals_reach_linux_with_their_cause() {
    if !ready() {
        return;
    }
    for uni in ["uni30", "uni31", "uni40"] {
        let net = Net::new(&format!("linuxatm-svc-refuse-{uni}"));
        for (to, what) in [(NATM, "nobody listens"), (NOWHERE, "no route")] {
            let mut g = net.boot(
                uni,
                "send",
                &[("to", to.to_string()), ("limit", "10".to_string())],
            );
            let rc = g.marker("send rc=", STEP);
            g.marker("sigd-log end", STEP);
            let console = g.console();
            assert_eq!(rc, "1", "{uni}, {what}: svc_send fails\n{console}");
            assert!(
                console.contains("connect:"),
                "{uni}, {what}: the failure is the call's\n{console}"
            );
            eprintln!(
                "{uni}, {what}: {}",
                console
                    .lines()
                    .find(|l| l.contains("connect:"))
                    .unwrap_or_default()
            );
        }
        let stat = net.sw.stat();
        assert_eq!(stat["calls"].as_array().map(Vec::len), Some(0), "{stat}");
        assert!(
            stat["calls_refused"].as_u64() >= Some(1),
            "the no-route refusal is the switch's: {stat}"
        );
    }
}
