#!/usr/bin/env bash
# TCP through the silent black hole of tests/path_mtu.rs (issue 30, RFC 8899's
# reference): two namespaces joined by a veth of MTU 1500, the sender's GSO off so
# that the filter sees link packets, and the receiver dropping every IP packet over
# 1,320 octets without ICMP. iperf3 TCP at each net.ipv4.tcp_mtu_probing (0, Linux's
# default: no probing; 1: after a black hole is suspected; 2: always).
#
#   black_hole_tcp.sh          the hole from the start: 10 s of TCP-cubic, goodput
#   black_hole_tcp.sh mid [CC] the hole opens 2.5 s into 8 s at 100 Mbit/s (CC:
#                              cubic by default, or bbr): the longest time the
#                              receiver got nothing, in its 100 ms intervals
#
# Needs root, iproute2, nftables, ethtool and iperf3; every namespace it makes is
# removed at the end.
set -u
mode=${1:-start}
cc=${2:-cubic}
A=bhA$$
B=bhB$$
cleanup() {
    for ns in $A $B; do
        ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null
        ip netns del $ns 2>/dev/null
    done
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
  hole
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
log=$(mktemp)
for probing in 0 1 2; do
  ip netns exec $B nft delete table inet bh 2>/dev/null
  ip netns exec $A sysctl -qw net.ipv4.tcp_mtu_probing=$probing
  ip netns exec $B iperf3 -s -1 -i 0.1 --forceflush -f m >"$log" 2>&1 &
  server=$!
  sleep 0.5
  timeout 30 ip netns exec $A iperf3 -c 10.244.0.2 -t 8 -b 100M -C "$cc" >/dev/null 2>&1 &
  client=$!
  sleep 2.5
  hole
  wait $client
  wait $server
  # Intervals "a-b sec ... N Mbits/sec": the longest run of empty ones after the hole.
  echo "tcp_mtu_probing=$probing ($cc): $(awk '$4 == "sec" && $3 ~ /-/ {split($3, t, "-"); if (t[1] >= 2.5) { if ($7 < 1) { run += 0.1; if (run > worst) worst = run } else { if (run > 0) back = 1; run = 0 } } }
    END { printf "longest stall %.1f s%s", worst, (run > 0 ? " (not recovered at the end)" : "") }' "$log")"
done
rm -f "$log"
