#!/usr/bin/env bash
# Transfers through the silent black hole of tests/path_mtu.rs (issue 30, RFC 8899):
# two namespaces joined by a veth of MTU 1500, the sender's GSO off so that the filter
# sees link packets, and the receiver dropping every IP packet over 1,320 octets
# without ICMP.
#
#   black_hole.sh        the hole from the start: 10 s of iperf3 TCP-cubic at each
#                        net.ipv4.tcp_mtu_probing (0, Linux's default: no probing;
#                        1: after a black hole is suspected; 2: always), goodput
#   black_hole.sh mid    the hole opens 2.5 s into a transfer at 100 Mbit/s (tbf):
#                        natm-pp, QUIC (quinn), TCP-cubic and TCP-BBR, each by
#                        `natm-lab perf loss-peer`, TCP at tcp_mtu_probing 1 and 0;
#                        the longest time the receiver got nothing, and its goodput
#                        ($STACKS: the runs, e.g. "natm-pp quic tcp-cubic:1")
#   NOHOLE=1 black_hole.sh mid   the same behind the tbf with no hole at all
#
# Needs root, iproute2, nftables, ethtool, iperf3 (start), openssl and a release
# natm-lab ($NATM_LAB, default target/release/natm-lab) (mid); every namespace it
# makes is removed at the end.
set -u
mode=${1:-start}
A=bhA$$
B=bhB$$
tmp=$(mktemp -d)
cleanup() {
    for ns in $A $B; do
        ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null
        ip netns del $ns 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
hole() {
    ip netns exec $B nft add table inet bh
    ip netns exec $B nft add chain inet bh pre '{ type filter hook prerouting priority -300 ; }'
    ip netns exec $B nft add rule inet bh pre ip length '>' 1320 drop
}
ip netns add $A; ip netns add $B
ip link add va netns $A type veth peer name vb netns $B
ip -n $A addr add 10.244.0.1/24 dev va; ip -n $B addr add 10.244.0.2/24 dev vb
ip -n $A link set va up; ip -n $B link set vb up; ip -n $A link set lo up; ip -n $B link set lo up
ip netns exec $A ethtool -K va gso off tso off tx-udp-segmentation off >/dev/null 2>&1
if [ "$mode" = start ]; then
  [ -n "${NOHOLE:-}" ] || hole
  for probing in 0 1 2; do
    ip netns exec $A sysctl -qw net.ipv4.tcp_mtu_probing=$probing
    ip netns exec $B iperf3 -s -1 >/dev/null 2>&1 & sleep 0.5
    echo "tcp_mtu_probing=$probing: $(timeout 30 ip netns exec $A iperf3 -c 10.244.0.2 -t 10 -C cubic -J 2>/dev/null | python3 -c 'import json,sys
try:
  d=json.load(sys.stdin); e=d["end"]; print("%.1f Mbit/s received over %.1f s" % (e["sum_received"]["bits_per_second"]/1e6, e["sum_received"]["seconds"]))
except Exception as x: print("no result", x)')"
  done
  exit 0
fi
lab=$(realpath "${NATM_LAB:-target/release/natm-lab}")
tc -n $A qdisc add dev va root tbf rate 100mbit burst 32kb latency 50ms
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost -addext basicConstraints=critical,CA:FALSE \
    -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
openssl x509 -in "$tmp/cert.pem" -outform der -out "$tmp/cert.der"
openssl pkcs8 -topk8 -nocrypt -in "$tmp/key.pem" -outform der -out "$tmp/key.der"
port=7400
# Packets the sender's rate limiter dropped so far (its queue full).
tbf_drops() { tc -n $A -s qdisc show dev va | grep -o 'dropped [0-9]*' | head -1 | cut -d' ' -f2; }
for run in ${STACKS:-natm-pp quic tcp-cubic:1 tcp-bbr:1 tcp-cubic:0}; do
  stack=${run%%:*}; probing=${run#*:}; [ "$probing" = "$run" ] && probing=0
  port=$((port + 1))
  ip netns exec $B nft delete table inet bh 2>/dev/null
  ip netns exec $A sysctl -qw net.ipv4.tcp_mtu_probing=$probing
  peer=(perf loss-peer --stack "$stack" --addr 10.244.0.2:$port --size 65536 --cert "$tmp/cert.der")
  ip netns exec $B timeout 30 "$lab" "${peer[@]}" recv --time 7s --warmup 0s --key "$tmp/key.der" \
      >"$tmp/recv.out" 2>"$tmp/recv.err" &
  recv=$!
  for _ in $(seq 100); do grep -q ready "$tmp/recv.out" 2>/dev/null && break; sleep 0.05; done
  drops0=$(tbf_drops)
  ip netns exec $A timeout 30 "$lab" "${peer[@]}" send --time 12s >/dev/null 2>"$tmp/send.err" &
  send=$!
  sleep 2.5
  [ -n "${NOHOLE:-}" ] || hole
  wait $recv
  kill $send 2>/dev/null; wait $send 2>/dev/null
  label=$stack; case $stack in tcp-*) label="$stack (tcp_mtu_probing=$probing)";; esac
  echo "$label: $(tail -n 1 "$tmp/recv.out" | python3 -c 'import json,sys
try:
  d=json.loads(sys.stdin.read()); print("longest stall %.0f ms, %.1f Mbit/s over %.1f s" % (d["longest_gap_ms"], d["bps"]/1e6, d["seconds"]))
except Exception as x: print("no result", x)'), $(( $(tbf_drops) - drops0 )) dropped at the tbf $(tail -n 1 "$tmp/recv.err")"
done
