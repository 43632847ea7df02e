//! Waiting: an application thread waits on one end's condition, reading the link
//! itself while it waits if it can take the read role (`wait_on`).

use super::*;

impl Conn {
    /// Wait (as an application thread) until `cond` holds for the sending end,
    /// reading the socket when no one else is. `None` timeout: forever.
    pub(crate) fn wait_tx<R>(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
        cond: impl FnMut(&mut End<TxHalf>) -> Option<R>,
    ) -> Option<R> {
        // A sender held back by its leaky bucket waits for the bucket's timer,
        // which the driver runs, not for the socket: blocked in the socket's
        // receive it would sleep out the whole read slice (50 ms) while the driver
        // emptied its send buffer at the reserved rate, and a fast guaranteed VC
        // then idled most of the time (`natm-lab perf guaranteed`: 0.29 of 1 Gbit/s).
        // On the condition variable the driver's `after` wakes it as soon as the
        // timer made room.
        self.wait_on(eng, &self.tx, &self.tx_cv, timeout, cond, |e| {
            e.half.over_rate()
        })
    }

    /// As [`Conn::wait_tx`], for the receiving end.
    pub(crate) fn wait_rx<R>(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
        mut cond: impl FnMut(&mut End<RxHalf>) -> Option<R>,
    ) -> Option<R> {
        let taken = |end: &mut End<RxHalf>| {
            // Even when `cond` finds nothing whole yet: it may have taken part of a
            // message (`recv` gathers chunks), freeing the window all the same.
            let r = cond(end);
            self.send_read_control(eng, end);
            r
        };
        self.wait_on(eng, &self.rx, &self.rx_cv, timeout, taken, |_| false)
    }

    /// After the application took data: a read that reopened a shut window queued a
    /// window update, sent now — the sender has nothing in flight whose arrival would
    /// make this host look at the VC again, and would wait for its retransmission
    /// timer (issue 34).
    pub(crate) fn send_read_control(&self, eng: &Engine, end: &mut End<RxHalf>) {
        if end.half.has_control() {
            self.after(
                eng,
                Which::Rx,
                end,
                &self.rx_cv,
                eng.clock.now(),
                usize::MAX,
            );
        }
    }

    fn wait_on<H, R>(
        &self,
        eng: &Engine,
        m: &Mutex<End<H>>,
        cv: &Condvar,
        timeout: Option<Duration>,
        mut cond: impl FnMut(&mut End<H>) -> Option<R>,
        paced: impl Fn(&End<H>) -> bool,
    ) -> Option<R> {
        let mut until = None;
        let mut batch = eng.take_buffer();
        let out = loop {
            let paced = {
                let mut end = lock(m);
                if let Some(r) = cond(&mut end) {
                    break Some(r);
                }
                paced(&end)
            };
            // The deadline is set at the first miss: what is ready already costs no
            // clock read (a chunk at a time, that was one read per TPDU). A deadline
            // just set has not passed unless the timeout was zero: one read, not two.
            let first_miss = until.is_none();
            let until =
                *until.get_or_insert_with(|| timeout.map(|t| std::time::Instant::now() + t));
            let may_have_passed = !first_miss || timeout.is_some_and(|t| t.is_zero());
            // What the wait has left bounds the socket's wait below: a recv with a
            // timeout shorter than the read slice returns on time.
            let mut left = timeout.filter(|_| first_miss);
            if let (true, Some(u)) = (may_have_passed, until) {
                let now = std::time::Instant::now();
                if now >= u {
                    // A thread that gives up leaves the socket to the driver, parked
                    // or not.
                    self.unpark(eng);
                    break None;
                }
                left = Some(u - now);
            }
            if paced || !self.read_as_app(eng, &mut batch, left) {
                let mut end = lock(m);
                if let Some(r) = cond(&mut end) {
                    break Some(r);
                }
                let slice = crate::engine::link::READ_SLICE.min(
                    until.map_or(crate::engine::link::READ_SLICE, |u| {
                        u.saturating_duration_since(std::time::Instant::now())
                    }),
                );
                end.waiters += 1;
                cv.wait_for(&mut end, slice);
                end.waiters -= 1;
            }
        };
        eng.give_buffer(batch);
        self.end_waits(eng);
        out
    }
}
