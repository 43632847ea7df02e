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

# QoS changes: the receiver's flags and events follow; beyond the bounds is refused.
QOS = "cbr:pcr=8Mbps,min_pcr=1Mbps"
lst = host.listen(call.split(":")[1] + "q" if call else "127.0.0.1:0", QOS)
conn = host.connect(call + "q" if call else lst.address(), QOS)
peer = lst.accept()
conn.send(b"at 8")
msg, f = peer.recv_status()
assert msg == b"at 8" and f.bits & natm.F_MSG_START and f.bits & natm.F_MSG_END, f.bits
assert f.rx_rate_bps == 8_000_000, f.rx_rate_bps
assert conn.set_qos("cbr:pcr=2Mbps") == 2_000_000
conn.send(b"at 2")
msg, f = peer.recv_status()
assert msg == b"at 2" and f.rx_rate_bps == 2_000_000, (msg, f.rx_rate_bps)
ev = peer.next_event(5000)
assert ev and ev.kind == natm.EV_PEER_QOS_CHANGED and ev.rate_bps == 2_000_000, ev
kinds = [conn.next_event().kind, conn.next_event().kind]
assert kinds == [natm.EV_QOS_PENDING, natm.EV_QOS_CHANGED], kinds
try:
    conn.set_qos("cbr:pcr=16Mbps")
    raise AssertionError("a rate beyond the bounds was taken")
except natm.Error as e:
    assert e.code == natm.EQOSBOUNDS, (e.code, e.message)
st = conn.status()
assert st.flags.tx_rate_bps == 2_000_000 and st.flags.bits & natm.F_QOS_CHANGED, st.flags.bits
conn.shutdown()
assert peer.recv() is None
ev = peer.next_event(5000)
assert ev and ev.kind == natm.EV_PEER_CLOSED, ev and ev.kind
for h in (conn, peer, lst):
    h.close()

# A multipoint root to two leaves; one dropped, the other still receives.
leaves = [host.listen(f"{call.split(':')[1]}m{i}" if call else "127.0.0.1:0", "best-effort")
          for i in range(2)]
addrs = [f"{call}m{i}" if call else l.address() for i, l in enumerate(leaves)]
root = host.connect_multipoint(addrs[0], "guaranteed:pcr=2Mbps")
got = [leaves[0].accept()]
assert root.add_sink(addrs[1]) == 1
got.append(leaves[1].accept())
assert root.leaves() == [0, 1]
assert root.send(b"both") == 2
assert [c.recv() for c in got] == [b"both", b"both"]
root.drop_sink(1)
assert got[1].recv() is None, "the dropped leaf saw no end of data"
assert root.send(b"one") == 1
assert got[0].recv() == b"one"
evs = []
while (ev := root.next_event()) is not None:
    evs.append((ev.kind, ev.leaf))
assert evs == [(natm.LEAF_ADDED, 0), (natm.LEAF_ADDED, 1), (natm.LEAF_DROPPED, 1)], evs
root.close()
assert got[0].recv() is None
for h in got + leaves:
    h.close()
assert host.close(5000)
print(f"python binding {natm.version()}: all checks passed")
