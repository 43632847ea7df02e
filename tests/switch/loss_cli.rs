//! Exact loss counts on a VC without error control (issue 14), as `natm listen`
//! reports them: a `natm switch` drops a share of the datagrams it sends to the
//! listener's host, and the listener's summary accounts for every message the caller
//! sent — delivered or counted lost, once — and for every lost TPDU.
//!
//! ```text
//!  h1 (+4420001) ── S ──(loss)── h2 (+4420002)
//! ```

use std::time::Duration;

use crate::sigd_support::tool::{listen, natm};
use crate::two_hosts::{json, two_hosts, FAST};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn the_listener_counts_every_lost_message_and_tpdu_once() {
    let (sw, a, b) = two_hosts("loss", "seed = 7\n", FAST, &format!("{FAST}loss = 0.03\n"));
    let l = listen(&b, &["load", "--discard", "--json"]);
    // 1,000 messages of three 1,024-octet TPDUs, paced.
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:load",
            "--qos",
            "ubr:tpdu=1024",
            "--bytes",
            "3000000",
            "--size",
            "3000",
            "--rate",
            "100Mbps",
            "--json",
            "--quiet",
        ],
        None,
    )
    .wait(LIMIT);
    assert!(c.status.success(), "{}", c.stderr);
    let l = l.wait(LIMIT);
    assert!(l.status.success(), "{}", l.stderr);
    let (cs, ls) = (json(&c.stdout), json(&l.stdout));
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert_eq!(n(&cs, "messages_sent"), 1000, "{cs}");
    let (got, lost) = (n(&ls, "messages_received"), n(&ls, "messages_lost"));
    assert_eq!(
        got + lost,
        1000,
        "every message delivered or counted lost once: {ls}"
    );
    assert!(lost > 0 && got > 0, "3% loss of 3,000 TPDUs: {ls}");
    // 3,000 octets are three TPDUs of 1,024 (the last of 952): every one of the
    // 3,000 either arrived or is counted lost, once — lost by the switch's random
    // loss or by a full socket queue on the way (the load runs beside other work).
    let tpdus = n(&ls, "tpdus_lost");
    assert_eq!(n(&ls, "tpdus_received") + tpdus, 3000, "{ls}");
    assert!(tpdus >= lost, "each lost message lost a TPDU: {ls}");
    assert!(tpdus <= 3 * lost, "a lost TPDU costs one message: {ls}");
    assert!(n(&ls, "gaps") <= tpdus, "{ls}");
    drop(sw);
}
