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
"""

import ctypes
import os

NONBLOCK = 1
FD_RECV = 0
FD_SEND = 1
EAGAIN = -2

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

    def shutdown(self):
        _check(_lib.natm_shutdown(self._c))

    def close(self):
        if self._c:
            _lib.natm_conn_close(self._c)
            self._c = None
