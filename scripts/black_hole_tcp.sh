#!/usr/bin/env bash
# TCP through the silent black hole of tests/path_mtu.rs (issue 30, RFC 8899's
# reference): two namespaces joined by a veth of MTU 1500, the sender's GSO off so
# that the filter sees link packets, and the receiver dropping every IP packet over
# 1,320 octets without ICMP. iperf3 TCP-cubic for 10 s at each
# net.ipv4.tcp_mtu_probing (0, Linux's default: no probing; 1: after a black hole is
# suspected; 2: always). Needs root, iproute2, nftables, ethtool and iperf3; every
# namespace it makes is removed at the end.
set -u
A=bhA$$
B=bhB$$
cleanup() {
    for ns in $A $B; do
        ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null
        ip netns del $ns 2>/dev/null
    done
}
trap cleanup EXIT
ip netns add $A; ip netns add $B
ip link add va netns $A type veth peer name vb netns $B
ip -n $A addr add 10.244.0.1/24 dev va; ip -n $B addr add 10.244.0.2/24 dev vb
ip -n $A link set va up; ip -n $B link set vb up; ip -n $A link set lo up; ip -n $B link set lo up
ip netns exec $A ethtool -K va gso off tso off tx-udp-segmentation off >/dev/null 2>&1
ip netns exec $B nft add table inet bh
ip netns exec $B nft add chain inet bh pre '{ type filter hook prerouting priority -300 ; }'
ip netns exec $B nft add rule inet bh pre ip length '>' 1320 drop
for probing in 0 1 2; do
  ip netns exec $A sysctl -qw net.ipv4.tcp_mtu_probing=$probing
  ip netns exec $B iperf3 -s -1 >/dev/null 2>&1 & sleep 0.5
  echo "tcp_mtu_probing=$probing: $(timeout 30 ip netns exec $A iperf3 -c 10.244.0.2 -t 10 -C cubic -J 2>/dev/null | python3 -c 'import json,sys
try:
  d=json.load(sys.stdin); e=d["end"]; print("%.1f Mbit/s received over %.1f s" % (e["sum_received"]["bits_per_second"]/1e6, e["sum_received"]["seconds"]))
except Exception as x: print("no result", x)')"
done
