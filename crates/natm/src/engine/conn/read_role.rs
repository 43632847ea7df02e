//! The read role: who reads a connection's link, and whether the driver watches it.
//!
//! One thread at a time reads the link — the driver, or an application thread that
//! waits on it in `recv` — and only that thread moves the link in or out of the
//! driver's epoll set. That thread holds the *read role* ([`Reading`]); the link's
//! place in the driver's set is a [`Watch`], changed only through a [`Reading`] by
//! the named transitions below, each of which says what the epoll set must do
//! ([`Epoll`]). Anyone may read the state ([`ReadSide::watch`]): the park sweep and
//! a poller deciding whether to read once more do, without taking the role.
//!
//! A thread that finds the role taken does not wait for it: it leaves an [`Ask`] and
//! tries once more (the ask precedes the attempt), and the holder answers every ask
//! as it lets the role go ([`ReadSide::let_go`]); an ask is cleared only by a holder
//! that then answers it, so none is lost whoever takes the role next.
//!
//! The transitions (`Epoll` in brackets):
//!
//! | from | transition | to |
//! |---|---|---|
//! | `Watched` | `begin_wait` | `Waiting` [remove] |
//! | `Parked` | `begin_wait` | `Waiting` |
//! | `Waiting` | `park` | `Parked` |
//! | `Waiting`, `Parked` | `rewatch` | `Watched` [add] |
//! | `Watched` | `hold` | `Held` [remove] |
//! | `Waiting`, `Parked` | `hold` | `Held` |
//! | `Held` | `end_hold` | `Watched` [add] |
//!
//! Any other pair leaves the state as it is and the set alone. An aborted connection
//! is *shut* ([`ReadSide::shut`], by whichever thread aborts it, role or not): its
//! link leaves the set for good and no transition puts it back.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Where the link stands with the driver's epoll set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// In the set: the driver reads whatever arrives.
    Watched,
    /// Out while an application thread waits on the link itself (one datagram wakes
    /// one thread, as on raw UDP) and until its `recv` ends.
    Waiting,
    /// Out between an application's `recv` calls on a VC that exchanges no ACKs,
    /// since the park sweep numbered `since` (`conn::park`).
    Parked { since: u64 },
    /// Out because the receive side is over its high watermark (seed 000 §6.2.2): the
    /// kernel sheds the excess until a reader takes the backlog under the low one.
    Held,
}

/// What a transition asks of the driver's epoll set.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Epoll {
    Keep,
    Add,
    Remove,
}

impl Watch {
    /// An application thread is about to wait on the link.
    pub(crate) fn begin_wait(&mut self) -> Epoll {
        match *self {
            Watch::Watched => {
                *self = Watch::Waiting;
                Epoll::Remove
            }
            Watch::Parked { .. } => {
                *self = Watch::Waiting;
                Epoll::Keep
            }
            Watch::Waiting | Watch::Held => Epoll::Keep,
        }
    }

    /// A wait read something and the VC may stay out of the set until its next
    /// `recv`, from sweep `since` on.
    pub(crate) fn park(&mut self, since: u64) -> Epoll {
        if *self == Watch::Waiting {
            *self = Watch::Parked { since };
        }
        Epoll::Keep
    }

    /// The driver must read the link again: a wait ended, or someone needs the driver.
    pub(crate) fn rewatch(&mut self) -> Epoll {
        match *self {
            Watch::Waiting | Watch::Parked { .. } => {
                *self = Watch::Watched;
                Epoll::Add
            }
            Watch::Watched | Watch::Held => Epoll::Keep,
        }
    }

    /// The receive side went over its high watermark.
    pub(crate) fn hold(&mut self) -> Epoll {
        let was = std::mem::replace(self, Watch::Held);
        match was {
            Watch::Watched => Epoll::Remove,
            _ => Epoll::Keep,
        }
    }

    /// The receive side came back under its low watermark: the set reports at once
    /// whatever queued meanwhile.
    pub(crate) fn end_hold(&mut self) -> Epoll {
        if *self == Watch::Held {
            *self = Watch::Watched;
            Epoll::Add
        } else {
            Epoll::Keep
        }
    }

    fn encode(self) -> u64 {
        match self {
            Watch::Watched => 0,
            Watch::Waiting => 1,
            Watch::Held => 2,
            Watch::Parked { since } => (since << 2) | 3,
        }
    }

    fn decode(v: u64) -> Watch {
        match v & 3 {
            0 => Watch::Watched,
            1 => Watch::Waiting,
            2 => Watch::Held,
            _ => Watch::Parked { since: v >> 2 },
        }
    }
}

/// What a thread that found the role taken leaves for its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Ask {
    /// The link may hold datagrams nobody will read otherwise (the driver found it
    /// readable; a reader consumed enough to end a watermark hold): drain it.
    Drain = 1,
    /// sigd said the peer released the call: drain what the RELEASE followed, then
    /// end the receiving VC.
    Release = 2,
    /// Someone needs the driver to watch the link: an async reader's waker, a close,
    /// an OAM probe, a waiter that gave up.
    Rewatch = 4,
}

/// Not an ask: the connection aborted and its link is read no more.
const SHUT: u8 = 8;
const ASKS: u8 = Ask::Drain as u8 | Ask::Release as u8 | Ask::Rewatch as u8;

/// A connection's read side: the role, the link's [`Watch`], and the asks.
#[derive(Debug)]
pub(crate) struct ReadSide {
    taken: AtomicBool,
    watch: AtomicU64,
    asks: AtomicU8,
}

impl Default for ReadSide {
    fn default() -> Self {
        ReadSide {
            taken: AtomicBool::new(false),
            watch: AtomicU64::new(Watch::Watched.encode()),
            asks: AtomicU8::new(0),
        }
    }
}

/// The read role, held: the right to read the link and to move it in or out of the
/// driver's set. Let it go with [`ReadSide::let_go`], which answers the asks; a
/// guard merely dropped (a panic) frees the role and leaves the asks for the next.
#[derive(Debug)]
pub(crate) struct Reading<'a> {
    side: &'a ReadSide,
}

impl ReadSide {
    /// The link's place in the driver's set now (it may change as soon as it is read,
    /// unless this thread holds the role).
    pub(crate) fn watch(&self) -> Watch {
        Watch::decode(self.watch.load(Ordering::SeqCst))
    }

    /// Take the role if nobody holds it.
    pub(crate) fn try_take(&self) -> Option<Reading<'_>> {
        // Not `then_some`: a `Reading` made and dropped would free the role.
        match self
            .taken
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => Some(Reading { side: self }),
            Err(_) => None,
        }
    }

    /// Take the role, or leave `ask` for the thread that holds it. A thread that
    /// takes it after asking answers its own ask (a drain: by what it does next;
    /// the others as it lets the role go).
    pub(crate) fn take_or_ask(&self, ask: Ask) -> Option<Reading<'_>> {
        if let Some(r) = self.try_take() {
            return Some(r);
        }
        self.ask(ask);
        // The holder may have let go just before the ask: it did not see it.
        let r = self.try_take()?;
        if ask == Ask::Drain {
            self.asks.fetch_and(!(Ask::Drain as u8), Ordering::SeqCst);
        }
        Some(r)
    }

    /// Leave `ask` for the holder (the caller then tries the role, so that an ask
    /// made just as the holder let go is answered by the caller itself).
    pub(crate) fn ask(&self, ask: Ask) {
        self.asks.fetch_or(ask as u8, Ordering::SeqCst);
    }

    /// Whether `ask` waits for an answer.
    pub(crate) fn asked(&self, ask: Ask) -> bool {
        self.asks.load(Ordering::SeqCst) & ask as u8 != 0
    }

    /// The connection aborted: nothing more is read, and no transition puts the link
    /// back in the driver's set (the aborting thread takes it out).
    pub(crate) fn shut(&self) {
        self.asks.fetch_or(SHUT, Ordering::SeqCst);
    }

    pub(crate) fn is_shut(&self) -> bool {
        self.asks.load(Ordering::SeqCst) & SHUT != 0
    }

    /// Let the role go, answering every ask first — those already made, and those
    /// made while it was let go, by taking it once more — with `answer(role, ask)`,
    /// where `ask` is the one to answer ([`Ask::Drain`] stands for "read", the others
    /// for themselves after a read of their own if they need one). Returns with the
    /// role free or held by a thread that took it after the last look.
    pub(crate) fn let_go<'a>(
        &'a self,
        mut role: Reading<'a>,
        mut answer: impl FnMut(&mut Reading<'a>, Ask),
    ) {
        loop {
            for ask in [Ask::Release, Ask::Rewatch] {
                if self.take_ask(ask) {
                    answer(&mut role, ask);
                }
            }
            drop(role);
            // SeqCst both sides: an ask raised after that thread failed to take the
            // role is seen here (its ask precedes its attempt, our release this load).
            if self.asks.load(Ordering::SeqCst) & ASKS == 0 {
                return;
            }
            match self.try_take() {
                Some(r) => role = r,
                None => return,
            }
            if self.take_ask(Ask::Drain) {
                answer(&mut role, Ask::Drain);
            }
        }
    }

    fn take_ask(&self, ask: Ask) -> bool {
        self.asks.fetch_and(!(ask as u8), Ordering::SeqCst) & ask as u8 != 0
    }

    /// Whether a thread holds the role now (for tests of who waits where).
    #[cfg(test)]
    pub(crate) fn is_taken(&self) -> bool {
        self.taken.load(Ordering::SeqCst)
    }
}

impl Reading<'_> {
    /// The link's place in the driver's set.
    pub(crate) fn watch(&self) -> Watch {
        self.side.watch()
    }

    /// Make a transition (`Watch::begin_wait`, `Watch::rewatch`, …): what it asks of
    /// the epoll set, which the caller does. A shut link makes no transition that
    /// would add it: the state stays where the link is, out of the set.
    pub(crate) fn go(&mut self, transition: impl FnOnce(&mut Watch) -> Epoll) -> Epoll {
        let mut w = self.watch();
        let e = transition(&mut w);
        if e == Epoll::Add && self.side.is_shut() {
            return Epoll::Keep;
        }
        self.side.watch.store(w.encode(), Ordering::SeqCst);
        e
    }

    /// Set the state outright: an epoll change a transition asked for failed, and the
    /// link is where it was (`Watched` after a failed removal).
    pub(crate) fn undo(&mut self, to: Watch) {
        self.side.watch.store(to.encode(), Ordering::SeqCst);
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.side.taken.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    const ALL: [Watch; 5] = [
        Watch::Watched,
        Watch::Waiting,
        Watch::Parked { since: 7 },
        Watch::Parked { since: 1 << 40 },
        Watch::Held,
    ];

    type Transition = fn(&mut Watch) -> Epoll;
    /// A transition's name, and where it goes from `Watched`, `Waiting`, `Parked`
    /// and `Held`.
    type Row = (&'static str, Transition, [(Watch, Epoll); 4]);

    fn step(from: Watch, t: Transition) -> (Watch, Epoll) {
        let mut w = from;
        let e = t(&mut w);
        (w, e)
    }

    #[test]
    fn every_transition_from_every_state_is_the_table_in_the_module_doc() {
        use Epoll::*;
        use Watch::*;
        let p = Parked { since: 7 };
        let table: [Row; 5] = [
            (
                "begin_wait",
                Watch::begin_wait,
                [
                    (Waiting, Remove),
                    (Waiting, Keep),
                    (Waiting, Keep),
                    (Held, Keep),
                ],
            ),
            (
                "park",
                |w| w.park(9),
                [
                    (Watched, Keep),
                    (Parked { since: 9 }, Keep),
                    (p, Keep),
                    (Held, Keep),
                ],
            ),
            (
                "rewatch",
                Watch::rewatch,
                [
                    (Watched, Keep),
                    (Watched, Add),
                    (Watched, Add),
                    (Held, Keep),
                ],
            ),
            (
                "hold",
                Watch::hold,
                [(Held, Remove), (Held, Keep), (Held, Keep), (Held, Keep)],
            ),
            (
                "end_hold",
                Watch::end_hold,
                [(Watched, Keep), (Waiting, Keep), (p, Keep), (Watched, Add)],
            ),
        ];
        for (name, t, expect) in table {
            for (from, want) in [Watched, Waiting, p, Held].into_iter().zip(expect) {
                assert_eq!(step(from, t), want, "{name} from {from:?}");
            }
        }
    }

    #[test]
    fn the_link_is_out_of_the_set_exactly_when_the_epoll_changes_say_so() {
        // Walk every sequence of 6 transitions from `Watched`, applying the epoll
        // changes to a model set: it never removes what is out nor adds what is in,
        // and the state says where the link is.
        let ts: [Transition; 5] = [
            Watch::begin_wait,
            |w| w.park(3),
            Watch::rewatch,
            Watch::hold,
            Watch::end_hold,
        ];
        for n in 0..ts.len().pow(6) {
            let (mut w, mut in_set, mut k) = (Watch::Watched, true, n);
            for _ in 0..6 {
                match ts[k % ts.len()](&mut w) {
                    Epoll::Add => {
                        assert!(!in_set, "sequence {n}: added twice");
                        in_set = true;
                    }
                    Epoll::Remove => {
                        assert!(in_set, "sequence {n}: removed twice");
                        in_set = false;
                    }
                    Epoll::Keep => {}
                }
                k /= ts.len();
                assert_eq!(in_set, w == Watch::Watched, "sequence {n}: {w:?}");
            }
        }
    }

    #[test]
    fn the_state_reads_back_as_it_was_stored() {
        for w in ALL {
            assert_eq!(Watch::decode(w.encode()), w);
        }
    }

    #[test]
    fn a_shut_link_is_never_added_back_and_its_asks_are_still_answered() {
        let side = ReadSide::default();
        let mut r = side.try_take().unwrap();
        assert_eq!(r.go(Watch::begin_wait), Epoll::Remove);
        side.shut();
        assert_eq!(r.go(Watch::rewatch), Epoll::Keep);
        assert_eq!(
            r.watch(),
            Watch::Waiting,
            "the state says where the link is"
        );
        assert!(side.is_shut());
        side.ask(Ask::Release);
        let mut answered = vec![];
        side.let_go(r, |_, a| answered.push(a));
        assert_eq!(answered, [Ask::Release]);
        assert!(side.is_shut(), "shut stays when the asks are answered");
    }

    #[test]
    fn a_thread_that_finds_the_role_taken_asks_and_the_holder_answers_on_letting_go() {
        let side = ReadSide::default();
        let r = side.try_take().unwrap();
        assert!(side.take_or_ask(Ask::Drain).is_none());
        assert!(side.take_or_ask(Ask::Rewatch).is_none());
        assert!(side.asked(Ask::Drain));
        let mut answered = vec![];
        side.let_go(r, |_, a| answered.push(a));
        assert_eq!(answered, [Ask::Rewatch, Ask::Drain]);
        assert!(!side.is_taken());
        assert!(!side.asked(Ask::Drain) && !side.asked(Ask::Rewatch));
    }

    #[test]
    fn a_thread_that_takes_the_role_after_asking_for_a_drain_owns_its_ask() {
        let side = ReadSide::default();
        // As if the holder let go between the ask and the second attempt.
        side.ask(Ask::Drain);
        let r = side.take_or_ask(Ask::Drain).expect("free");
        // `take_or_ask` took it at its first attempt: the earlier ask is still there,
        // answered as this thread lets go.
        let mut answered = vec![];
        side.let_go(r, |_, a| answered.push(a));
        assert_eq!(answered, [Ask::Drain]);
    }

    /// Many threads arrive at once, each as the driver finding the link readable
    /// does (a unit of work, then take the role or ask for a drain): every unit is
    /// taken by some holder's drain, whoever holds the role when it arrives.
    #[test]
    fn no_arrival_is_left_unread_however_the_threads_interleave() {
        for _round in 0..50 {
            let side = Arc::new(ReadSide::default());
            let arrived = Arc::new(AtomicUsize::new(0));
            let read = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (side, arrived, read) = (side.clone(), arrived.clone(), read.clone());
                    std::thread::spawn(move || {
                        for _ in 0..200 {
                            arrived.fetch_add(1, Ordering::SeqCst);
                            let drain =
                                || read.store(arrived.load(Ordering::SeqCst), Ordering::SeqCst);
                            if let Some(r) = side.take_or_ask(Ask::Drain) {
                                drain();
                                side.let_go(r, |_, a| {
                                    assert_eq!(a, Ask::Drain);
                                    drain();
                                });
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert!(!side.is_taken());
            assert_eq!(read.load(Ordering::SeqCst), 800, "an arrival went unread");
        }
    }
}
