//! What the files of this binary share.

use natm::ulib::{ConnStats, HostConfig};

/// What every test of the binary starts a host from: the library's default with the
/// binary's ports (`crate::PORTS`). `ulib` runs its tests with a UDP socket per VC
/// end, `ulib_host` the same tests with one socket per host (issue 30).
pub(crate) fn host_config() -> HostConfig {
    let mut cfg = HostConfig::default();
    cfg.engine.ports = crate::PORTS;
    cfg
}

/// Assert that a sending VC resent nothing by SMART's fast path (issue 34: no
/// spurious retransmission on a loss-free path), and print every retransmission
/// counter: `sender` is its connection's counters, read after the transfer (after
/// `flush` where the test has one, so that a late retransmission is counted too),
/// `receiver` the peer's. Only for paths that lose nothing: loopback or the mem
/// adaptor, with nothing dropped on purpose.
///
/// The timeout's and the two-RTT head check's resends are printed, not asserted: a
/// receiver or ACK path descheduled on a loaded host past the head check's 2 ms floor
/// or the RTO cannot be told from a lost tail TPDU
/// (docs/decisions/0034-spurious-retransmissions.md). The virtual-time tests assert
/// none of any kind.
///
/// The message names the counters by cause, as `natm stat` does ("retx f/t/h": the
/// fast path, the timeout, the head check), with what tells a loss from a spurious
/// resend: the receiver's duplicates (a spurious resend arrives twice), its socket
/// queue's drops (a real loss, in the kernel or the mem port) and its watermark holds.
#[track_caller]
pub(crate) fn assert_no_retransmissions(what: &str, sender: &ConnStats, receiver: &ConnStats) {
    let (t, r) = (&sender.tx, &receiver.rx);
    let counters = format!(
        "retx f/t/h {}/{}/{} of {} TPDUs ({} timeouts, {} head checks, {} marked lost by \
         the fast path, {} by the timeout; srtt {:?}, rate {:?} bit/s, window {:?}); the \
         receiver got {} TPDUs, {} of them twice, {} out of order, its socket queue \
         dropped {:?} datagrams, its engine stopped reading at the high watermark {} times",
        t.retx_fast,
        t.retx_timeout,
        t.retx_head,
        t.tpdus_sent,
        t.timeouts,
        t.head_checks,
        t.fast_marked,
        t.timeout_marked,
        sender.srtt,
        sender.rate_bps,
        sender.window,
        r.tpdus_received,
        r.dup_tpdus,
        r.ooo_tpdus,
        receiver.queue_drops,
        receiver.watermark_holds,
    );
    assert!(
        t.retx_fast == 0 && t.fast_marked == 0,
        "{what}: retransmissions on a loss-free path: {counters}\n\
         sender: {sender:?}\nreceiver: {receiver:?}"
    );
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    eprintln!("retransmissions of {test} ({what}): {counters}");
}
