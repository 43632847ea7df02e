"""natm from Python: a ctypes binding of the C API (natm.h, libnatm.so).

    import natm
    host = natm.Host()                      # $NATM_SIGD, else /run/natm/sigd.sock
    lst = host.listen("echo", "reliable")   # a SAP through sigd, or "127.0.0.1:0"
    conn = host.connect("+4420001:echo", "reliable")
    peer = lst.accept()
    conn.send(b"hello")
    assert peer.recv() == b"hello"

The library is found through $NATM_LIB (a path to libnatm.so), else the loader's
search path. Errors raise natm.Error with the code, natm_last_error()'s sentence and
the UNI cause; NATM_EAGAIN raises BlockingIOError.

QoS changes and status (seed 003):

    conn.set_qos("cbr:pcr=4Mbps")           # waits for the peer; the new rate
    peer.recv_status()                      # (message, Flags): flags.rx_rate_bps...
    peer.next_event(1000)                   # Event(kind=EV_PEER_QOS_CHANGED, ...)

and a point-to-multipoint root:

    root = host.connect_multipoint("+4420002:mc", "guaranteed:pcr=4Mbps")
    leaf = root.add_sink("+4420003:mc")
    root.send(b"to every leaf")             # how many leaves it reached
    root.drop_sink(leaf)
    root.next_event()                       # LeafEvent(kind=LEAF_ADDED, ...) or None
"""

import ctypes
import os

NONBLOCK = 1
FD_RECV = 0
FD_SEND = 1
FD_EVENT = 2
EAGAIN = -2
ETIMEDOUT = -7
EQOSBOUNDS = -15
EQOSREFUSED = -16
EQOSPENDING = -17

# struct natm_flags's bits
F_MSG_START, F_MSG_END, F_PEER_CLOSED, F_CLOSED, F_ABORTED = 0x1, 0x2, 0x4, 0x8, 0x10
F_WINDOW_FULL, F_OVER_RATE, F_QOS_PENDING, F_QOS_CHANGED = 0x20, 0x40, 0x80, 0x100
F_QOS_REFUSED, F_PEER_QOS_CHANGED, F_PEER_QOS_REFUSED, F_RELEASED = 0x200, 0x400, 0x800, 0x1000
# struct natm_event's kinds
(EV_QOS_PENDING, EV_QOS_CHANGED, EV_QOS_REFUSED, EV_PEER_QOS_CHANGED, EV_PEER_QOS_REFUSED,
 EV_WINDOW_FULL, EV_OVER_RATE, EV_PEER_CLOSED, EV_CLOSED, EV_ABORTED, EV_RELEASED) = range(1, 12)
# struct natm_leaf_event's kinds
LEAF_ADDED, LEAF_LEFT, LEAF_DROPPED = 1, 2, 3


class Flags(ctypes.Structure):
    """struct natm_flags: seed 003's status flags and the rates each way."""
    _fields_ = [("bits", ctypes.c_uint32), ("abort_reason", ctypes.c_int),
                ("tx_rate_bps", ctypes.c_uint64), ("rx_rate_bps", ctypes.c_uint64),
                ("qos_rate_bps", ctypes.c_uint64), ("peer_qos_rate_bps", ctypes.c_uint64)]


class Status(ctypes.Structure):
    """struct natm_status: counters, call state and flags."""
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "bytes_sent", "bytes_retransmitted", "tpdus_sent", "retransmissions",
        "bytes_received", "messages_received", "send_queued", "recv_queued", "srtt_us",
        "rate_bps", "window", "granted_tx_bps")] + [
        (n, ctypes.c_int) for n in ("signalled", "released", "release_cause", "is_stream")] + [
        ("flags", Flags), ("events_dropped", ctypes.c_uint64)]


class Event(ctypes.Structure):
    """struct natm_event: a status change (kind EV_*, cause, rate_bps, detail)."""
    _fields_ = [("kind", ctypes.c_int), ("cause", ctypes.c_int),
                ("rate_bps", ctypes.c_uint64), ("_detail", ctypes.c_char * 128)]

    @property
    def detail(self):
        return self._detail.decode(errors="replace")


class LeafEvent(ctypes.Structure):
    """struct natm_leaf_event: a leaf added, left (cause, detail) or dropped."""
    _fields_ = [("kind", ctypes.c_int), ("leaf", ctypes.c_int), ("cause", ctypes.c_int),
                ("_detail", ctypes.c_char * 128)]

    @property
    def detail(self):
        return self._detail.decode(errors="replace")


_lib = ctypes.CDLL(os.environ.get("NATM_LIB", "libnatm.so"))
_p = ctypes.c_void_p
_c = ctypes.c_char_p
for name, res, args in [
    ("natm_strerror", _c, [ctypes.c_int]),
    ("natm_last_error", _c, []),
    ("natm_last_cause", ctypes.c_int, []),
    ("natm_version", _c, []),
    ("natm_open", ctypes.c_int, [_c, ctypes.POINTER(_p)]),
    ("natm_host_close", ctypes.c_int, [_p, ctypes.c_uint32]),
    ("natm_listen", ctypes.c_int, [_p, _c, _c, ctypes.c_int, ctypes.POINTER(_p)]),
    ("natm_accept", ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(_p)]),
    ("natm_listener_fd", ctypes.c_int, [_p]),
    ("natm_listener_addr", ctypes.c_int, [_p, _c, ctypes.c_size_t]),
    ("natm_listener_close", None, [_p]),
    ("natm_connect", ctypes.c_int, [_p, _c, _c, ctypes.POINTER(_p)]),
    ("natm_send", ctypes.c_ssize_t, [_p, _c, ctypes.c_size_t, ctypes.c_int]),
    ("natm_recv", ctypes.c_ssize_t,
     [_p, _p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
    ("natm_conn_fd", ctypes.c_int, [_p, ctypes.c_int]),
    ("natm_shutdown", ctypes.c_int, [_p]),
    ("natm_set_rate", ctypes.c_int, [_p, ctypes.c_uint64]),
    ("natm_granted_qos", ctypes.c_int, [_p, _c, ctypes.c_size_t]),
    ("natm_conn_close", None, [_p]),
    ("natm_set_qos", ctypes.c_int, [_p, _c, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64)]),
    ("natm_try_set_qos", ctypes.c_int, [_p, _c]),
    ("natm_status", ctypes.c_int, [_p, ctypes.POINTER(Status)]),
    ("natm_recv_status", ctypes.c_ssize_t,
     [_p, _p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(Flags)]),
    ("natm_next_event", ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(Event)]),
    ("natm_mp_connect", ctypes.c_int, [_p, _c, _c, ctypes.POINTER(_p)]),
    ("natm_add_sink", ctypes.c_int, [_p, _c]),
    ("natm_drop_sink", ctypes.c_int, [_p, ctypes.c_int, ctypes.c_uint32]),
    ("natm_mp_send", ctypes.c_ssize_t, [_p, _c, ctypes.c_size_t]),
    ("natm_mp_leaves", ctypes.c_int, [_p, ctypes.POINTER(ctypes.c_int), ctypes.c_size_t]),
    ("natm_mp_next_event", ctypes.c_int, [_p, ctypes.POINTER(LeafEvent)]),
    ("natm_mp_close", ctypes.c_int, [_p, ctypes.c_uint32]),
]:
    f = getattr(_lib, name)
    f.restype = res
    f.argtypes = args


class Error(Exception):
    """A natm call failed: code (negative), message, UNI cause (0: none)."""

    def __init__(self, code):
        self.code = code
        self.message = _lib.natm_last_error().decode()
        self.cause = _lib.natm_last_cause()
        super().__init__(f"{_lib.natm_strerror(code).decode()}: {self.message}")


def _check(rc):
    if rc == EAGAIN:
        raise BlockingIOError(_lib.natm_last_error().decode())
    if rc < 0:
        raise Error(rc)
    return rc


def version():
    return _lib.natm_version().decode()


class Host:
    """A natm host (engine); sigd=None: $NATM_SIGD or the default, "": none."""

    def __init__(self, sigd=None):
        self._h = _p()
        _check(_lib.natm_open(None if sigd is None else sigd.encode(), ctypes.byref(self._h)))

    def listen(self, addr, qos="reliable", backlog=16):
        l = _p()
        _check(_lib.natm_listen(self._h, addr.encode(), qos.encode(), backlog, ctypes.byref(l)))
        return Listener(l)

    def connect(self, addr, qos="reliable"):
        c = _p()
        _check(_lib.natm_connect(self._h, addr.encode(), qos.encode(), ctypes.byref(c)))
        return Connection(c)

    def connect_multipoint(self, first_leaf, qos="best-effort"):
        """The root of a point-to-multipoint VC to first_leaf (leaf 0)."""
        m = _p()
        _check(_lib.natm_mp_connect(self._h, first_leaf.encode(), qos.encode(), ctypes.byref(m)))
        return Multipoint(m)

    def close(self, linger_ms=5000):
        if self._h:
            done = _lib.natm_host_close(self._h, linger_ms)
            self._h = None
            return bool(done)
        return True


class Listener:
    def __init__(self, l):
        self._l = l

    def accept(self, block=True):
        c = _p()
        _check(_lib.natm_accept(self._l, 0 if block else NONBLOCK, ctypes.byref(c)))
        return Connection(c)

    def fileno(self):
        return _check(_lib.natm_listener_fd(self._l))

    def address(self):
        buf = ctypes.create_string_buffer(128)
        _check(_lib.natm_listener_addr(self._l, buf, len(buf)))
        return buf.value.decode()

    def close(self):
        if self._l:
            _lib.natm_listener_close(self._l)
            self._l = None


class Connection:
    def __init__(self, c):
        self._c = c
        self._buf = ctypes.create_string_buffer(65536)

    def send(self, data, block=True):
        return _check(_lib.natm_send(self._c, bytes(data), len(data), 0 if block else NONBLOCK))

    def recv(self, block=True):
        """The next whole message (bytes), or None at the end of data."""
        parts, eom = [], ctypes.c_int(0)
        flags = 0 if block else NONBLOCK
        while True:
            n = _lib.natm_recv(self._c, self._buf, len(self._buf), flags, ctypes.byref(eom))
            if n == EAGAIN and parts:
                flags = 0  # the rest of a message that has begun is on its way
                continue
            _check(n)
            if n == 0 and not eom.value:
                return None
            parts.append(self._buf.raw[:n])
            if eom.value:
                return b"".join(parts)

    def fileno(self, which=FD_RECV):
        return _check(_lib.natm_conn_fd(self._c, which))

    def granted_qos(self):
        buf = ctypes.create_string_buffer(256)
        _check(_lib.natm_granted_qos(self._c, buf, len(buf)))
        return buf.value.decode()

    def set_rate(self, bps):
        _check(_lib.natm_set_rate(self._c, bps))

    def set_qos(self, qos, timeout_ms=5000):
        """Change the sending VC's QoS with the peer's consent; the rate now in force.
        Error codes: EQOSBOUNDS, EQOSREFUSED, EQOSPENDING, ETIMEDOUT (still pending)."""
        rate = ctypes.c_uint64(0)
        _check(_lib.natm_set_qos(self._c, qos.encode(), timeout_ms, ctypes.byref(rate)))
        return rate.value

    def try_set_qos(self, qos):
        """Ask for a QoS change without waiting: the answer is an event."""
        _check(_lib.natm_try_set_qos(self._c, qos.encode()))

    def status(self):
        st = Status()
        _check(_lib.natm_status(self._c, ctypes.byref(st)))
        return st

    def recv_status(self, block=True):
        """The next whole message (or None at the end of data) and the Flags as they
        were after its last piece, F_MSG_START set if its first piece started it."""
        parts, f = [], Flags()
        flags, start = (0 if block else NONBLOCK), 0
        while True:
            n = _lib.natm_recv_status(self._c, self._buf, len(self._buf), flags, ctypes.byref(f))
            if n == EAGAIN and parts:
                flags = 0
                continue
            _check(n)
            if n == 0 and not f.bits & F_MSG_END:
                return None, f
            if not parts:
                start = f.bits & F_MSG_START
            parts.append(self._buf.raw[:n])
            if f.bits & F_MSG_END:
                f.bits = (f.bits & ~F_MSG_START) | start
                return b"".join(parts), f

    def next_event(self, timeout_ms=0):
        """The next status Event; None if none came within timeout_ms (0: none queued
        now; -1: wait for one). fileno(FD_EVENT) is readable while one may be queued."""
        ev = Event()
        rc = _lib.natm_next_event(self._c, timeout_ms, ctypes.byref(ev))
        if rc in (EAGAIN, ETIMEDOUT):
            return None
        _check(rc)
        return ev

    def shutdown(self):
        _check(_lib.natm_shutdown(self._c))

    def close(self):
        if self._c:
            _lib.natm_conn_close(self._c)
            self._c = None


class Multipoint:
    """The root of a point-to-multipoint VC: every message goes to every leaf."""

    def __init__(self, m):
        self._m = m

    def add_sink(self, addr):
        """Add a leaf; its number."""
        return _check(_lib.natm_add_sink(self._m, addr.encode()))

    def drop_sink(self, leaf, timeout_ms=5000):
        _check(_lib.natm_drop_sink(self._m, leaf, timeout_ms))

    def send(self, data):
        """Send one message to every leaf; how many it reached."""
        return _check(_lib.natm_mp_send(self._m, bytes(data), len(data)))

    def leaves(self):
        ids = (ctypes.c_int * 256)()
        n = _check(_lib.natm_mp_leaves(self._m, ids, len(ids)))
        return list(ids[:min(n, len(ids))])

    def next_event(self):
        """The oldest LeafEvent, or None."""
        ev = LeafEvent()
        rc = _lib.natm_mp_next_event(self._m, ctypes.byref(ev))
        if rc == EAGAIN:
            return None
        _check(rc)
        return ev

    def close(self, timeout_ms=5000):
        if self._m:
            rc = _lib.natm_mp_close(self._m, timeout_ms)
            self._m = None
            _check(rc)
