#!/usr/bin/env bash
# First-packet VC setup time of `natm ip` through 0, 1 or 2 `natm switch`es, and ping
# RTT over natm0 beside the plain IP path (issue 18). Hosts A and B in namespaces of
# their own; with switches, A and B reach each other only through them (namespace S,
# joined by veths; two switches are chained by a trunk on S's loopback); with none,
# the sigds talk directly over a veth.
#
# Each run: a cold first packet (ATMARP resolution and the call: the ATM address has
# aged out, --arp-age 6s) and, after the idle release (--idle 1s) with the address
# still cached, a first packet that needs the call alone. Printed per run: the first
# ping's RTT, the next ping's, and natm ip's own setup time of that VC (`last_setup_us`
# in its --report: from the packet's setup request to the call's CONNECT).
# Needs root. Usage: scripts/ip_switch_bench.sh HOPS(0|1|2) [RUNS]
set -euo pipefail
HOPS=${1:?usage: $0 HOPS [RUNS]}
RUNS=${2:-5}
NATM=${NATM:-target/release/natm}
T=$(printf '%x' $$)
A=nsb${T}a; B=nsb${T}b; S=nsb${T}s; D=$(mktemp -d)
PIDS=()
cleanup() {
  [ -n "${SHOWLOGS:-}" ] && tail -n 20 "$D"/*.log >&2
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for n in "$A" "$B" "$S"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT INT TERM
addr=(+4420001 +4420002); ns=("$A" "$B")
for n in "$A" "$B"; do ip netns add "$n"; ip -n "$n" link set lo up; done
if [ "$HOPS" = 0 ]; then
  ip link add va$T netns "$A" type veth peer name vb$T netns "$B"
  ip -n "$A" addr add 10.231.1.1/24 dev va$T; ip -n "$B" addr add 10.231.1.2/24 dev vb$T
  ip -n "$A" link set va$T up; ip -n "$B" link set vb$T up
  sig=(10.231.1.1 10.231.1.2); peer=(10.231.1.2:2905 10.231.1.1:2905); sw=(false false)
  prefix=("${addr[1]}" "${addr[0]}"); plain=10.231.1.2
else
  ip netns add "$S"; ip -n "$S" link set lo up
  for i in 0 1; do
    ip link add h$i$T netns "${ns[$i]}" type veth peer name s$i$T netns "$S"
    ip -n "${ns[$i]}" addr add 10.231.$((i + 1)).1/24 dev h$i$T
    ip -n "$S" addr add 10.231.$((i + 1)).254/24 dev s$i$T
    ip -n "${ns[$i]}" link set h$i$T up; ip -n "$S" link set s$i$T up
    ip -n "${ns[$i]}" route add 10.231.0.0/16 via 10.231.$((i + 1)).254
  done
  ip netns exec "$S" sysctl -qw net.ipv4.ip_forward=1
  sig=(10.231.1.1 10.231.2.1); peer=(10.231.1.254:2906 10.231.2.254:2906); sw=(true true)
  prefix=("*" "*"); plain=10.231.2.1
  port() { # name bind peer role
    printf '[[port]]\nname = "%s"\nbind = "%s"\npeer = "%s"\nmode = "frame"\nline_rate = 1000000000\nbuffer = 16384\nscheduler = "wrr"\nsignalling = "%s"\n' "$@"
  }
  route() { printf '[[route]]\nprefix = "%s"\nport = "%s"\n' "$@"; }
  if [ "$HOPS" = 1 ]; then
    { port a 10.231.1.254:2906 10.231.1.1:2905 host; port b 10.231.2.254:2906 10.231.2.1:2905 host
      route "${addr[0]}" a; route "${addr[1]}" b; } > "$D/s1.toml"
  else
    { port a 10.231.1.254:2906 10.231.1.1:2905 host; port t 127.0.0.1:2910 127.0.0.1:2911 switch
      route "${addr[0]}" a; route '*' t; } > "$D/s1.toml"
    { port b 10.231.2.254:2906 10.231.2.1:2905 host; port t 127.0.0.1:2911 127.0.0.1:2910 switch
      route "${addr[1]}" b; route '*' t; } > "$D/s2.toml"
  fi
  for f in "$D"/s*.toml; do
    ip netns exec "$S" "$NATM" switch --config "$f" >/dev/null 2>"${f%.toml}.log" & PIDS+=($!)
  done
fi
for i in 0 1; do
  cat > "$D/sigd$i.toml" <<EOT
addresses = ["${addr[$i]}"]
socket = "$D/sigd$i.sock"
signalling = "${sig[$i]}:2905"
[link]
capacity = "1Gbps"
tpdu_cost_ns = 1000
[[directory]]
prefix = "${prefix[$i]}"
peer = "${peer[$i]}"
switch = ${sw[$i]}
EOT
  ip netns exec "${ns[$i]}" "$NATM" sigd --config "$D/sigd$i.toml" 2>"$D/sigd$i.log" & PIDS+=($!)
done
for i in 0 1; do until [ -S "$D/sigd$i.sock" ]; do sleep 0.1; done; done
common=(--idle 1s --arp-age 6s --report 0.2s)
ip netns exec "$A" "$NATM" ip --address "${addr[0]}" --ipv4 10.77.0.1/24 --arp-server \
  --sigd "$D/sigd0.sock" "${common[@]}" 2>"$D/ip0.log" & PIDS+=($!)
sleep 1
ip netns exec "$B" "$NATM" ip --address "${addr[1]}" --ipv4 10.77.0.2/24 --arp "${addr[0]}" \
  --sigd "$D/sigd1.sock" "${common[@]}" 2>"$D/ip1.log" & PIDS+=($!)
for n in "$A" "$B"; do until ip -n "$n" link show natm0 >/dev/null 2>&1; do sleep 0.1; done; done
# B registered with A's ATMARP server (through the switches when there are any).
sleep 3
echo "# hops $HOPS; load: $(uptime)"
rtt() { ip netns exec "$A" ping -c 1 -W 5 "$1" | sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p'; }
setup_us() { sleep 0.5; grep -o 'last_setup_us: [0-9]*' "$D/ip0.log" | tail -1 | cut -d' ' -f2; }
echo "## run: cold first / next RTT ms, setup us; after idle first / next RTT ms, setup us"
for r in $(seq "$RUNS"); do
  sleep 7   # the VC idled out and the ATM address aged out at A
  c1=$(rtt 10.77.0.2); c2=$(rtt 10.77.0.2); cs=$(setup_us)
  sleep 2.5 # the VC idled out; the address is still cached
  i1=$(rtt 10.77.0.2); i2=$(rtt 10.77.0.2); is=$(setup_us)
  echo "run $r: cold $c1 / $c2 ms, $cs us; after idle $i1 / $i2 ms, $is us"
done
echo "## ping RTT, 50 probes 20 ms apart (min/avg/max/mdev ms)"
for r in $(seq "$RUNS"); do
  echo "run $r plain: $(ip netns exec "$A" ping -q -c 50 -i 0.02 "$plain" | tail -1)"
  echo "run $r natm0: $(ip netns exec "$A" ping -q -c 50 -i 0.02 10.77.0.2 | tail -1)"
done
echo "# load at the end: $(uptime)"
