//! Per-VC counters: what a user reads with `natm stat` and what the tests assert on.

use super::RetxKind;

/// Counters of one PSB. Every drop has its own reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PsbStats {
    /// New data TPDUs sent (first transmissions).
    pub tpdus_sent: u64,
    /// Payload bytes in first transmissions.
    pub bytes_sent: u64,
    /// Retransmissions triggered by SMART's fast path (holes revealed by an ACK).
    pub retx_fast: u64,
    /// Retransmissions triggered by the retransmission timeout.
    pub retx_timeout: u64,
    /// Retransmissions of the window head by the two-RTT check.
    pub retx_head: u64,
    /// Head retransmissions an ACK then showed spurious: the original had arrived
    /// (RFC 3522 detection by the echoed timestamp).
    pub retx_head_spurious: u64,
    /// Timeouts an ACK then showed spurious: the original of the window's head had
    /// arrived (RFC 3522, as for the head check).
    pub retx_timeout_spurious: u64,
    /// Payload bytes retransmitted.
    pub bytes_retransmitted: u64,
    /// TPDUs the fast path marked lost.
    pub fast_marked: u64,
    /// TPDUs the timeout marked for retransmission.
    pub timeout_marked: u64,
    /// Windows lost whole behind a first timeout's head: its retransmission arrived
    /// and none of the two or more TPDUs as long as it sent before the firing did,
    /// the sign of a path that shrank under them (RFC 8899 §4.3,
    /// [`crate::transport::Stall`]).
    pub windows_lost: u64,
    /// Adaptive senders (`tpdu=auto`): the size new TPDUs are cut to now (0: fixed).
    pub tpdu_size: u32,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Two-RTT head checks that found the cumulative ack stalled.
    pub head_checks: u64,
    /// ACKs received and used.
    pub acks_received: u64,
    /// ACKs that acknowledged data never sent (stale or forged).
    pub acks_invalid: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// In-order ACKs that a later in-order ACK of the same receive batch stood for
    /// (not sent; `acks_sent + acks_merged` is one per data TPDU acknowledged).
    pub acks_merged: u64,
    /// ACKs dropped because the control queue was full (the host did not poll).
    pub acks_dropped: u64,
    /// Times new data waited for the window.
    pub window_stalls: u64,
    /// Data TPDUs received.
    pub tpdus_received: u64,
    /// Payload bytes delivered to the application.
    pub bytes_delivered: u64,
    /// Messages delivered whole to the application.
    pub messages_delivered: u64,
    /// Duplicate TPDUs dropped.
    pub dup_tpdus: u64,
    /// TPDUs that arrived out of order and were held.
    pub ooo_tpdus: u64,
    /// TPDUs beyond the error-control window, dropped.
    pub drop_out_of_window: u64,
    /// TPDUs dropped for want of receive buffer.
    pub drop_rcv_buf: u64,
    /// TPDUs larger than the negotiated TPDU size, dropped.
    pub drop_oversize: u64,
    /// Unreliable VCs: TPDUs that arrived after a later one, dropped.
    pub drop_late: u64,
    /// Unreliable message VCs: TPDUs whose message head was lost, dropped.
    pub drop_headless: u64,
    /// Unreliable message VCs: messages discarded because a TPDU was missing.
    pub partial_messages_dropped: u64,
    /// Unreliable VCs: gaps in the sequence (runs of lost TPDUs).
    pub gaps: u64,
    /// Unreliable VCs: TPDUs that never arrived, each counted once — revealed by a
    /// later TPDU or by the CLOSE's sequence number.
    pub tpdus_lost: u64,
    /// Unreliable message VCs: messages not delivered because a TPDU of theirs never
    /// arrived (lost whole or in part) or the receiver had to drop them (buffer,
    /// size), each counted once; whole messages lost at the tail are counted from the
    /// CLOSE's message count.
    pub messages_lost: u64,
    /// Frames with a cookie other than this VC's, dropped.
    pub drop_bad_cookie: u64,
    /// Frames that are not TPDUs, or not valid in this state, dropped.
    pub drop_malformed: u64,
    /// Largest number of bytes held out of order.
    pub max_ooo_bytes: u64,
    /// Largest number of bytes buffered on the receive side.
    pub max_rcv_buffered: u64,
    /// SYNC probes sent (a VC without ACKs, seed 003).
    pub syncs_sent: u64,
    /// SYNC-ECHOs that answered the outstanding probe (RTT samples taken).
    pub sync_echoes: u64,
    /// SYNC-ECHOs of no outstanding probe (late, repeated or forged): no sample.
    pub sync_unmatched: u64,
    /// SYNCs left unanswered: more than one per 10 ms arrived.
    pub syncs_unanswered: u64,
}

impl PsbStats {
    pub(crate) fn count_retx(&mut self, kind: RetxKind, bytes: usize) {
        match kind {
            RetxKind::Fast => self.retx_fast += 1,
            RetxKind::Timeout => self.retx_timeout += 1,
            RetxKind::Head => self.retx_head += 1,
        }
        self.bytes_retransmitted += bytes as u64;
    }

    /// All retransmissions.
    pub fn retransmissions(&self) -> u64 {
        self.retx_fast + self.retx_timeout + self.retx_head
    }

    /// Retransmissions an ACK has not shown needless: what the path lost, as far as
    /// the sender knows. A head check or a timeout that fired because ACKs were late
    /// (a receiver kept off its CPU) lost nothing, and is taken back once an ACK
    /// shows the original arrived.
    pub fn losses(&self) -> u64 {
        self.retransmissions()
            .saturating_sub(self.retx_head_spurious + self.retx_timeout_spurious)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_are_the_retransmissions_no_ack_showed_needless() {
        let mut s = PsbStats::default();
        s.count_retx(RetxKind::Fast, 100);
        s.count_retx(RetxKind::Head, 100);
        s.count_retx(RetxKind::Timeout, 100);
        assert_eq!((s.retransmissions(), s.losses()), (3, 3));
        s.retx_head_spurious += 1;
        s.retx_timeout_spurious += 1;
        assert_eq!((s.retransmissions(), s.losses()), (3, 1));
    }
}
