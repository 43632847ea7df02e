#!/usr/bin/env bash
# Figures of `natm ip` (issue 18), side by side in one run between two network
# namespaces joined by a veth: first-packet VC setup time, iperf3 TCP over natm0 vs
# the plain veth vs a plain UDP tunnel (VXLAN over the same veth: this kernel has no
# WireGuard or FOU), ping RTT over each, and a 15 Mbit/s UDP flow on the policy's CBR
# VC beside bulk TCP. Needs root, iperf3, python3. Usage: scripts/ip_bench.sh [RUNS]
# NATM_IP_MTU=N sets natm0's MTU on both ends (default: natm ip's, 8464: whole sealed TPDUs
# on the 1500-octet veth). NATM_IP_CPU=1: only the CPU both natm ips spend per GB over
# natm0, RUNS times (needs perf).
set -euo pipefail
RUNS=${1:-3}
MTU_ARG=(); [ -n "${NATM_IP_MTU:-}" ] && MTU_ARG=(--mtu "$NATM_IP_MTU")
NATM=${NATM:-target/release/natm}
T=$(printf '%x' $$)
A=natmipb${T}a; B=natmipb${T}b; D=$(mktemp -d)
PIDS=()
cleanup() {
  [ -n "${SHOWLOGS:-}" ] && tail -n 20 "$D"/ip*.log "$D"/sigd*.log >&2
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  # The iperf3 server daemonised itself: its pid file is the only handle on it.
  [ -f "$D/iperf3s.pid" ] && kill "$(cat "$D/iperf3s.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT INT TERM
ip netns add "$A"; ip netns add "$B"
ip link add va$T netns "$A" type veth peer name vb$T netns "$B"
ip -n "$A" addr add 10.231.0.1/24 dev va$T; ip -n "$B" addr add 10.231.0.2/24 dev vb$T
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set va$T up; ip -n "$B" link set vb$T up
ip -n "$A" link add vx0 type vxlan id 42 remote 10.231.0.2 local 10.231.0.1 dstport 4789
ip -n "$B" link add vx0 type vxlan id 42 remote 10.231.0.1 local 10.231.0.2 dstport 4789
ip -n "$A" addr add 10.78.0.1/24 dev vx0; ip -n "$B" addr add 10.78.0.2/24 dev vx0
ip -n "$A" link set vx0 up; ip -n "$B" link set vx0 up
addr=(+4420001 +4420002); ns=("$A" "$B")
for i in 0 1; do
  j=$((1 - i))
  cat > "$D/sigd$i.toml" <<EOT
addresses = ["${addr[$i]}"]
socket = "$D/sigd$i.sock"
signalling = "10.231.0.$((i + 1)):2905"
[link]
capacity = "1Gbps"
tpdu_cost_ns = 1000
[[directory]]
prefix = "${addr[$j]}"
peer = "10.231.0.$((j + 1)):2905"
EOT
  ip netns exec "${ns[$i]}" "$NATM" sigd --config "$D/sigd$i.toml" 2>"$D/sigd$i.log" & PIDS+=($!)
done
for i in 0 1; do until [ -S "$D/sigd$i.sock" ]; do sleep 0.1; done; done
ip netns exec "$A" "$NATM" ip --address +4420001 --ipv4 10.77.0.1/24 --arp-server --sigd "$D/sigd0.sock" \
  --idle 2s --policy 'udp dport 5004 -> cbr:pcr=20Mbps' "${MTU_ARG[@]}" 2>"$D/ip0.log" & PIDS+=($!)
ip netns exec "$B" "$NATM" ip --address +4420002 --ipv4 10.77.0.2/24 --arp +4420001 --sigd "$D/sigd1.sock" \
  --idle 2s --policy 'udp dport 5004 -> cbr:pcr=20Mbps' "${MTU_ARG[@]}" 2>"$D/ip1.log" & PIDS+=($!)
for n in "$A" "$B"; do until ip -n "$n" link show natm0 >/dev/null 2>&1; do sleep 0.1; done; done
sleep 1
ip netns exec "$B" iperf3 -s -D -B 0.0.0.0 -I "$D/iperf3s.pid" --logfile "$D/iperf3s.log"
echo "# load: $(uptime)"
if [ -n "${NATM_IP_CPU:-}" ]; then
  # Only the CPU both natm ips spend per GB that iperf3 moves over natm0 in 4 s
  # (perf stat's task-clock on the two processes), RUNS times: A/B comparisons.
  ip netns exec "$A" ping -c 2 -W 5 10.77.0.2 >/dev/null
  echo "## natm ip CPU per GB over natm0 (iperf3 TCP, 4 s)"
  for r in $(seq "$RUNS"); do
    perf stat -x, -e task-clock -p "${PIDS[2]},${PIDS[3]}" -o "$D/cpu.txt" & PS=$!
    bytes=$(ip netns exec "$A" iperf3 -c 10.77.0.2 -t 4 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bytes"])')
    kill -INT "$PS"; wait "$PS" || true
    python3 - "$bytes" "$(grep task-clock "$D/cpu.txt" | cut -d, -f1)" "$r" <<'PY'
import sys
b, ms, r = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(f"run {r}: {b * 8 / 4e6:.0f} Mbit/s, {ms:.0f} ms of CPU, {ms / (b / 1e9):.0f} ms/GB")
PY
  done
  exit 0
fi
first_rtt() { ip netns exec "$A" ping -c 1 -W 5 "$1" | sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p'; }
echo "## first packet (ping) RTT, ms: resolution + VC setup, then VC setup alone (after idle release)"
for r in $(seq "$RUNS"); do
  ip netns exec "$A" "$NATM" stat --socket "$D/sigd0.sock" --json >/dev/null
  echo "run $r: first $(first_rtt 10.77.0.2); next $(first_rtt 10.77.0.2)"
  sleep 3.5   # idle release (2 s) on both ends
  echo "run $r: after idle release, first $(first_rtt 10.77.0.2); next $(first_rtt 10.77.0.2)"
  sleep 3.5
done
echo "## ping RTT, 50 probes 20 ms apart (min/avg/max/mdev ms)"
for r in $(seq "$RUNS"); do
  for dst in 10.231.0.2:veth 10.78.0.2:vxlan 10.77.0.2:natm0; do
    echo "run $r ${dst#*:}: $(ip netns exec "$A" ping -q -c 50 -i 0.02 "${dst%:*}" | tail -1)"
  done
done
echo "## iperf3 TCP, 5 s, one stream (Mbit/s received; the sender's retransmissions, max cwnd)"
for r in $(seq "$RUNS"); do
  for dst in 10.231.0.2:veth 10.78.0.2:vxlan 10.77.0.2:natm0; do
    bps=$(ip netns exec "$A" iperf3 -c "${dst%:*}" -t 5 -J | python3 -c 'import json,sys; e=json.load(sys.stdin); s=e["end"]; cw=max((i["streams"][0].get("snd_cwnd",0) for i in e["intervals"]), default=0); print(round(s["sum_received"]["bits_per_second"]/1e6,1), "retransmits", s["sum_sent"].get("retransmits"), "max_cwnd_KB", cw//1024)')
    echo "run $r ${dst#*:}: $bps"
  done
done
echo "## 15 Mbit/s UDP flow (dport 5004: the policy's CBR VC on natm0) beside iperf3 TCP, 5 s"
SINK='import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((sys.argv[1],5004)); s.settimeout(2); n=0; t0=None; t1=None
try:
  while True:
    b=s.recv(65536); t1=time.time(); t0=t0 or t1; n+=len(b)
except socket.timeout: pass
print(n, round(n*8/max(t1-t0,1e-9)/1e6,2) if t0 else 0)'
SRC='import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); n=0; t0=time.time()
while time.time()-t0<5:
  s.sendto(b"x"*1250,(sys.argv[1],5004)); n+=1250; d=t0+n*8/15e6-time.time()
  if d>0: time.sleep(d)
print(n)'
for r in $(seq "$RUNS"); do
  for dst in 10.231.0.2:veth 10.77.0.2:natm0; do
    ip netns exec "$B" python3 -c "$SINK" "${dst%:*}" > "$D/sink.out" & SP=$!
    sleep 0.3
    ip netns exec "$A" python3 -c "$SRC" "${dst%:*}" > "$D/src.out" & CP=$!
    bps=$(ip netns exec "$A" iperf3 -c "${dst%:*}" -t 5 -J | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6,1))')
    wait $CP; wait $SP
    read -r got rate < "$D/sink.out"
    echo "run $r ${dst#*:}: UDP flow sent $(cat "$D/src.out") B, received $got B at $rate Mbit/s; TCP beside it $bps Mbit/s"
  done
done
echo "## calls at A during the last run's end"
ip netns exec "$A" "$NATM" stat --socket "$D/sigd0.sock" | head -20
echo "# load: $(uptime)"
