//! ABR end to end (issue 33, docs/decisions/0033-abr.md): a natm host's ABR call
//! through `natm switch` whose port towards the callee is slow. The source's forward
//! RM cells cross that port, whose ERICA lowers their explicit rate; the callee's
//! engine turns them around; the source's allowed rate ends held under the port's
//! line rate, far below the 10 Gbit/s it may ask for with no `pcr`.
//!
//! ```text
//!  h1 (+4420001) ── S ──(20 Mbit/s)── h2 (+4420002)
//! ```

use std::time::Duration;

use crate::sigd_support::tool::{listen, natm};
use crate::two_hosts::{json, two_hosts, FAST};

const LIMIT: Duration = Duration::from_secs(30);
const LINE: u64 = 20_000_000;

#[test]
fn an_abr_call_is_held_to_the_slow_ports_explicit_rate() {
    let slow = format!("mode = \"frame\"\nline_rate = {LINE}\nbuffer = 16384\n");
    let (sw, a, b) = two_hosts("abr-calls", "", FAST, &slow);
    let l = listen(&b, &["load", "--discard", "--json"]);
    let c = natm(
        &a,
        &[
            "call",
            "+4420002:load",
            "--qos",
            "abr:ec=on",
            "--bytes",
            "4000000",
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
    assert_eq!(cs["bytes_sent"], 4_000_000, "{cs}");
    assert_eq!(ls["bytes_received"], 4_000_000, "every byte arrived: {ls}");
    let rm = &cs["rm"];
    assert!(rm["frm_sent"].as_u64() > Some(10), "{cs}");
    assert!(
        rm["brm_taken"].as_u64() > Some(10),
        "RM cells came back: {cs}"
    );
    assert!(
        ls["rm"]["turned"].as_u64() > Some(10),
        "the callee turned them: {ls}"
    );
    // No pcr: the source may ask for 10 Gbit/s; the port's ERICA (target 0.9 of its
    // line) held it under the line rate.
    let acr = cs["flow_rate_bps"]
        .as_u64()
        .expect("an ABR source has a rate");
    assert!(
        acr < LINE,
        "allowed rate {acr} over the {LINE} bit/s port: {cs}"
    );
    let v = sw.stat_until(|v| v["ports"][1]["stats"]["abr"]["rm_marked"].as_u64() > Some(0));
    assert_eq!(v["ports"][1]["name"], "h2", "{v}");
    drop(sw);
}
