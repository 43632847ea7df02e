"""Checks of the Python binding, run by tests/capi.rs (python3 check_natm.py [CALL]):
a listener and a caller in one process, messages both ways, a poll() on the
receive descriptor, the end of data, and an error with its cause. With CALL (e.g.
"+4420001:pyecho") the call goes through $NATM_SIGD and the listener binds the SAP
after the colon; without, direct mode on loopback."""

import select
import sys

import natm

call = sys.argv[1] if len(sys.argv) > 1 else None
host = natm.Host(None if call else "")
lst = host.listen(call.split(":")[1] if call else "127.0.0.1:0", "reliable")
conn = host.connect(call or lst.address(), "reliable")
peer = lst.accept()
for i in range(50):
    msg = bytes((i + j) % 256 for j in range(1 + i * 1500))
    conn.send(msg)
    assert peer.recv() == msg, f"message {i} differs"
try:
    peer.recv(block=False)
    raise AssertionError("nothing was sent: recv should block")
except BlockingIOError:
    pass
conn.send(b"late")
r, _, _ = select.select([peer.fileno()], [], [], 5)
assert r, "the receive descriptor did not become readable"
assert peer.recv(block=False) == b"late"
peer.send(b"back")
assert conn.recv() == b"back"
conn.shutdown()
assert peer.recv() is None, "no end of data"
if call:
    assert conn.granted_qos() == "reliable", conn.granted_qos()
    try:
        host.connect(call.split(":")[0] + ":nobody", "reliable")
        raise AssertionError("a call to nobody connected")
    except natm.Error as e:
        assert e.code == -4 and e.cause == 88, (e.code, e.cause, e.message)
try:
    host.listen("127.0.0.1:0", "cbr:pcr=fast")
    raise AssertionError("a bad QoS was taken")
except natm.Error as e:
    assert e.code == -3 and "fast" in e.message, e.message
for h in (conn, peer, lst):
    h.close()
assert host.close(5000)
print(f"python binding {natm.version()}: all checks passed")
