//! A fixed set of worker threads serving the messages of many connections (issue 31:
//! the ATMARP server's client VCs and `natm ip`'s IP VCs, never a thread per VC).
//!
//! Each connection is a task with a waker of its own ([`Connection::poll_recv`]): the
//! engine wakes it when a message arrives or the VC ends, which queues the task once;
//! a worker takes it, handles up to [`BUDGET`] messages and queues it again if more
//! wait (so one busy client cannot hold a worker while the others wait), and forgets
//! it when its VC has ended (its context's `ended` is told). A reply is sent without
//! waiting ([`Wait::No`]): a client that does not read its answers loses them
//! (counted) rather than stalling a worker.
//!
//! A worker polls a task until it is pending, so the engine ends a watermark hold on
//! its VC: the poll that finds nothing reads the socket once more, or has the thread
//! holding the read role do it (`engine/app.rs` `poll_recv_with`).
//!
//! A connection whose messages a thread of the caller's receives ([`ConnPool::add_sending`])
//! is a task whose turns only do the context's other work; that thread ends it
//! ([`ConnPool::end`]).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

use natm::ulib::{Connection, Wait};

/// Messages one task may have handled before it goes to the back of the queue.
const BUDGET: usize = 16;

/// What a pool does with one message of a connection: the reply to send, if any.
pub(crate) type Serve<C> = dyn Fn(&C, &[u8]) -> Option<Vec<u8>> + Send + Sync;

/// A connection's context in a pool: what the workers do besides receiving.
pub(crate) trait TaskContext: Send + Sync + 'static {
    /// At the start of each turn of the connection, before its messages: work that
    /// waits for the VC, such as sends that found no room. `cx` carries the task's
    /// waker (register it, e.g. with [`Connection::poll_send`], to be served again
    /// when the VC is ready).
    fn turn(&self, _conn: &Connection, _cx: &mut Context<'_>) {}
    /// At the end of each turn, after its messages (and before `ended`): work done
    /// once for all of them, such as writing what they held in one batch.
    fn turn_done(&self) {}
    /// The VC has ended (after its last message was served).
    fn ended(&self) {}
}

/// A task of a pool, as [`ConnPool::add_sending`] names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskId(u64);

/// The pool: its workers run until it is dropped.
pub(crate) struct ConnPool<C: TaskContext> {
    shared: Arc<Shared<C>>,
}

struct Shared<C> {
    tasks: Mutex<HashMap<u64, Arc<Task<C>>>>,
    ready: Mutex<VecDeque<u64>>,
    wake: Condvar,
    next_id: AtomicU64,
    stop: AtomicBool,
    serve: Box<Serve<C>>,
    replies_dropped: AtomicU64,
}

/// How a task's turn ended.
enum Turn {
    /// Its VC ended.
    Ended,
    /// It used its budget: more messages may wait.
    More,
    /// It has no message left (its waker is registered).
    Idle,
}

struct Task<C> {
    conn: Arc<Connection>,
    ctx: C,
    /// The pool's workers receive its messages (else a thread of the caller's does,
    /// and ends the task).
    receives: AtomicBool,
    /// Held by the worker serving the task: two workers never serve one connection
    /// at once, so its replies keep its requests' order.
    serving: Mutex<()>,
    /// Queued and not yet taken by a worker: a wake-up meanwhile adds nothing.
    queued: AtomicBool,
    waker: Waker,
}

/// The waker of one task: queues it on the pool it belongs to.
struct TaskWaker<C> {
    id: u64,
    pool: Weak<Shared<C>>,
}

impl<C: TaskContext> Wake for TaskWaker<C> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(pool) = self.pool.upgrade() {
            pool.queue(self.id);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<C: TaskContext> Shared<C> {
    fn queue(&self, id: u64) {
        let Some(task) = lock(&self.tasks).get(&id).cloned() else {
            return;
        };
        if !task.queued.swap(true, Ordering::AcqRel) {
            lock(&self.ready).push_back(id);
            self.wake.notify_one();
        }
    }

    /// The next task with work, or `None` once the pool stops.
    fn next(&self) -> Option<(u64, Arc<Task<C>>)> {
        let mut ready = lock(&self.ready);
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            if let Some(id) = ready.pop_front() {
                if let Some(task) = lock(&self.tasks).get(&id).cloned() {
                    return Some((id, task));
                }
                continue;
            }
            ready = self
                .wake
                .wait(ready)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Serve one task's messages, up to the budget.
    fn serve_task(&self, id: u64, task: &Task<C>) {
        let _serving = lock(&task.serving);
        task.queued.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&task.waker);
        task.ctx.turn(&task.conn, &mut cx);
        let after = if task.receives.load(Ordering::Acquire) {
            self.serve_messages(task, &mut cx)
        } else {
            Turn::Idle
        };
        task.ctx.turn_done();
        match after {
            // The VC ended: the task (and its context) goes.
            Turn::Ended => {
                lock(&self.tasks).remove(&id);
                task.ctx.ended();
            }
            // More may wait: to the back of the queue, behind the other clients.
            Turn::More => self.queue(id),
            Turn::Idle => {}
        }
    }

    /// Serve up to [`BUDGET`] of the task's messages.
    fn serve_messages(&self, task: &Task<C>, cx: &mut Context<'_>) -> Turn {
        for _ in 0..BUDGET {
            match task.conn.poll_recv(cx) {
                Poll::Ready(Ok(Some(msg))) => {
                    if let Some(reply) = (self.serve)(&task.ctx, &msg) {
                        if task.conn.send(&reply, Wait::No).is_err() {
                            self.replies_dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Poll::Ready(Ok(None) | Err(_)) => return Turn::Ended,
                Poll::Pending => return Turn::Idle,
            }
        }
        Turn::More
    }
}

impl<C: TaskContext> ConnPool<C> {
    /// Start `workers` threads named `name` that hand each message of the pool's
    /// connections to `serve`. A thread that cannot be started is an error (the
    /// threads already started stop with the pool).
    pub(crate) fn start(
        workers: usize,
        name: &str,
        serve: impl Fn(&C, &[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> io::Result<ConnPool<C>> {
        let shared = Arc::new(Shared {
            tasks: Mutex::new(HashMap::new()),
            ready: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            next_id: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            serve: Box::new(serve),
            replies_dropped: AtomicU64::new(0),
        });
        let pool = ConnPool { shared };
        for _ in 0..workers.max(1) {
            let s = pool.shared.clone();
            thread::Builder::new().name(name.into()).spawn(move || {
                while let Some((id, task)) = s.next() {
                    s.serve_task(id, &task);
                }
            })?;
        }
        Ok(pool)
    }

    /// Serve `conn` until its VC ends; `ctx` is handed to each call of the pool's
    /// `serve` for it, told when the VC has ended, and dropped with the task. The
    /// task's waker is returned: waking it serves the task again (its `turn` first).
    pub(crate) fn add(&self, conn: impl Into<Arc<Connection>>, ctx: C) -> Waker {
        self.add_task(conn.into(), ctx, true).0
    }

    /// As [`ConnPool::add`], for a connection whose messages a thread of the
    /// caller's receives: the task's turns do the context's `turn` and `turn_done`
    /// alone, and it lasts until that thread calls [`ConnPool::end`] (or
    /// [`ConnPool::receive`] hands its messages to the pool after all).
    pub(crate) fn add_sending(&self, conn: Arc<Connection>, ctx: C) -> (Waker, TaskId) {
        self.add_task(conn, ctx, false)
    }

    /// The pool's workers receive the messages of a task added by
    /// [`ConnPool::add_sending`] from now (its own thread could not be started).
    pub(crate) fn receive(&self, id: TaskId) {
        if let Some(task) = lock(&self.shared.tasks).get(&id.0).cloned() {
            task.receives.store(true, Ordering::Release);
        }
        self.shared.queue(id.0);
    }

    /// The VC of a task added by [`ConnPool::add_sending`] has ended: the task goes,
    /// after any turn under way, and its context is told.
    pub(crate) fn end(&self, id: TaskId) {
        let task = lock(&self.shared.tasks).remove(&id.0);
        if let Some(task) = task {
            let _serving = lock(&task.serving);
            task.ctx.ended();
        }
    }

    fn add_task(&self, conn: Arc<Connection>, ctx: C, receives: bool) -> (Waker, TaskId) {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            pool: Arc::downgrade(&self.shared),
        }));
        let task = Arc::new(Task {
            conn,
            ctx,
            receives: AtomicBool::new(receives),
            serving: Mutex::new(()),
            queued: AtomicBool::new(false),
            waker: waker.clone(),
        });
        lock(&self.shared.tasks).insert(id, task);
        // Whatever arrived before the first poll registered the waker.
        self.shared.queue(id);
        (waker, TaskId(id))
    }

    /// Connections being served.
    pub(crate) fn len(&self) -> usize {
        lock(&self.shared.tasks).len()
    }

    /// Replies not sent because the client's VC had no room for them.
    pub(crate) fn replies_dropped(&self) -> u64 {
        self.shared.replies_dropped.load(Ordering::Relaxed)
    }
}

impl<C: TaskContext> Drop for ConnPool<C> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ready = lock(&self.shared.ready);
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm::ulib::{Host, HostConfig, Listener};
    use std::time::{Duration, Instant};

    fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < until, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    impl TaskContext for usize {}

    /// A server host whose accepted connections go to a pool of `workers` that
    /// answer each message with it in upper case `times` times over, tagged with the
    /// client's number.
    fn upper_server(
        workers: usize,
        times: usize,
    ) -> (Host, std::net::SocketAddr, Arc<ConnPool<usize>>) {
        let host = Host::open(HostConfig::default()).unwrap();
        let l = host.bind("127.0.0.1:0", "reliable").unwrap();
        let addr = l.local_addr().unwrap();
        let pool = Arc::new(
            ConnPool::start(workers, "test-pool", move |n: &usize, m: &[u8]| {
                let mut r = format!("{n}:").into_bytes();
                for _ in 0..times {
                    r.extend(m.to_ascii_uppercase());
                }
                Some(r)
            })
            .unwrap(),
        );
        let p = pool.clone();
        thread::spawn(move || {
            let mut n = 0;
            while let Ok(c) = l.accept(Wait::Block) {
                let _ = p.add(c, n);
                n += 1;
            }
        });
        (host, addr, pool)
    }

    #[test]
    fn two_workers_answer_many_connections_in_order_and_forget_the_ended_ones() {
        let (_server, addr, pool) = upper_server(2, 1);
        let client = Host::open(HostConfig::default()).unwrap();
        let conns: Vec<Connection> = (0..48)
            .map(|_| client.connect(addr, "reliable").unwrap())
            .collect();
        // Every client's requests, all in flight before any answer is read.
        for (i, c) in conns.iter().enumerate() {
            for k in 0..3 {
                c.send(format!("c{i} m{k}").as_bytes(), Wait::Block)
                    .unwrap();
            }
        }
        let five = Wait::For(Duration::from_secs(5));
        let mut tags = std::collections::HashSet::new();
        for (i, c) in conns.iter().enumerate() {
            for k in 0..3 {
                let r = String::from_utf8(c.recv(five).unwrap().unwrap()).unwrap();
                let (tag, body) = r.split_once(':').unwrap();
                assert_eq!(body, format!("C{i} M{k}"), "in order on each VC");
                tags.insert(tag.to_owned());
            }
        }
        assert_eq!(tags.len(), 48, "each connection its own task");
        assert_eq!(pool.len(), 48);
        drop(conns);
        wait_until("the ended VCs to be forgotten", || pool.len() == 0);
    }

    /// What a [`Logged`] connection's pool did, in order.
    type Log = Arc<Mutex<Vec<String>>>;

    /// A context that logs its turns' ends and its VC's end.
    struct Logged(Log);

    impl TaskContext for Logged {
        fn turn_done(&self) {
            lock(&self.0).push("done".into());
        }
        fn ended(&self) {
            lock(&self.0).push("ended".into());
        }
    }

    /// A server host's listener, its address, and a pool of one worker that logs
    /// each message it serves in its connection's [`Logged`] log.
    fn logging_pool() -> (Host, Listener, std::net::SocketAddr, ConnPool<Logged>) {
        let server = Host::open(HostConfig::default()).unwrap();
        let l = server.bind("127.0.0.1:0", "reliable").unwrap();
        let addr = l.local_addr().unwrap();
        let pool = ConnPool::start(1, "test-pool", |c: &Logged, m: &[u8]| {
            lock(&c.0).push(format!("m {}", String::from_utf8_lossy(m)));
            None
        })
        .unwrap();
        (server, l, addr, pool)
    }

    #[test]
    fn each_turn_ends_after_its_messages_and_before_the_vc_ends() {
        let (_server, l, addr, pool) = logging_pool();
        let client = Host::open(HostConfig::default()).unwrap();
        let c = client.connect(addr, "reliable").unwrap();
        let log = Log::default();
        let _ = pool.add(l.accept(Wait::Block).unwrap(), Logged(log.clone()));
        for k in 0..40 {
            c.send(format!("{k}").as_bytes(), Wait::Block).unwrap();
        }
        c.close();
        drop(c);
        wait_until("the VC to end", || {
            lock(&log).last().map(String::as_str) == Some("ended")
        });
        let log = lock(&log).clone();
        let messages: Vec<&String> = log.iter().filter(|e| e.starts_with("m ")).collect();
        let want: Vec<String> = (0..40).map(|k| format!("m {k}")).collect();
        assert_eq!(messages, want.iter().collect::<Vec<_>>(), "{log:?}");
        // Whatever a turn's messages left to do (natm ip: the TUN writes they
        // queued) is done before the next turn and before the VC's end.
        let last_message = log.iter().rposition(|e| e.starts_with("m ")).unwrap();
        assert!(
            log[last_message..].iter().any(|e| e == "done"),
            "a turn ends after the last message: {log:?}"
        );
        assert_eq!(log.iter().filter(|e| *e == "ended").count(), 1, "{log:?}");
        let turns = log.iter().filter(|e| *e == "done").count();
        assert!(
            (1..=40).contains(&turns),
            "at most a turn per message, at least one: {log:?}"
        );
    }

    #[test]
    fn a_task_received_elsewhere_leaves_its_messages_to_its_reader() {
        let (_server, l, addr, pool) = logging_pool();
        let client = Host::open(HostConfig::default()).unwrap();
        let five = Wait::For(Duration::from_secs(5));
        let mut ids = Vec::new();
        let mut logs = Vec::new();
        let mut accepted = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..2 {
            clients.push(client.connect(addr, "reliable").unwrap());
            let conn = Arc::new(l.accept(Wait::Block).unwrap());
            let log = Log::default();
            let (waker, id) = pool.add_sending(conn.clone(), Logged(log.clone()));
            // A wake-up serves its other work, never its messages.
            waker.wake_by_ref();
            ids.push(id);
            logs.push(log);
            accepted.push(conn);
        }
        for (k, c) in clients.iter().enumerate() {
            c.send(format!("first {k}").as_bytes(), Wait::Block)
                .unwrap();
        }
        for (k, conn) in accepted.iter().enumerate() {
            let m = conn.recv(five).unwrap().unwrap();
            assert_eq!(
                m,
                format!("first {k}").into_bytes(),
                "its own reader has it"
            );
        }
        wait_until("a turn of the first task", || {
            lock(&logs[0]).iter().any(|e| e == "done")
        });
        // The first task's reader ends it; the second's hands it to the pool.
        pool.end(ids[0]);
        let first = lock(&logs[0]).clone();
        assert!(first.iter().all(|e| !e.starts_with("m ")), "{first:?}");
        assert_eq!(first.last().map(String::as_str), Some("ended"), "{first:?}");
        assert_eq!(pool.len(), 1);
        pool.receive(ids[1]);
        clients[1].send(b"second", Wait::Block).unwrap();
        wait_until("the pool to serve the handed-over task", || {
            lock(&logs[1]).iter().any(|e| e == "m second")
        });
        assert!(
            !lock(&logs[1]).iter().any(|e| e.starts_with("m first")),
            "the pool took a message its reader had: {:?}",
            lock(&logs[1])
        );
        clients[1].close();
        drop(clients);
        wait_until("the handed-over VC to end", || pool.len() == 0);
        assert_eq!(lock(&logs[1]).iter().filter(|e| *e == "ended").count(), 1);
    }

    #[test]
    fn a_client_that_never_reads_its_answers_stalls_no_one() {
        // One worker: a worker held by the greedy client would hold every client.
        let (_server, addr, pool) = upper_server(1, 8);
        let client = Host::open(HostConfig::default()).unwrap();
        let greedy = Arc::new(client.connect(addr, "reliable").unwrap());
        let polite = client.connect(addr, "reliable").unwrap();
        // Answers eight times its requests, far more than its VC and buffers hold; it
        // reads none.
        let g = greedy.clone();
        let flood = thread::spawn(move || {
            let big = vec![b'x'; 4 << 10];
            for _ in 0..2_000 {
                if g.send(&big, Wait::Block).is_err() {
                    break;
                }
            }
        });
        wait_until("answers to be dropped", || pool.replies_dropped() > 0);
        let five = Wait::For(Duration::from_secs(5));
        polite.send(b"hello", Wait::Block).unwrap();
        let r = polite.recv(five).unwrap().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&r),
            format!("1:{}", "HELLO".repeat(8))
        );
        greedy.abort();
        flood.join().unwrap();
    }
}
