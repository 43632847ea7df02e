#!/usr/bin/env bash
# How long a natm host without a configured address takes to get one by ILMI (issue
# 33): a switch with one host port (`ilmi_prefix`), and a sigd started RUNS times
# against it with the same key (a host restarting). For each start, from sigd's own
# log: start → signalling link up (Noise handshake + SSCOP), and link up → the
# address the switch took. The first is the reference ILMI adds to. Loopback only.
# Usage: scripts/ilmi_bench.sh [RUNS]   (NATM=path/to/natm; default target/release/natm)
set -euo pipefail
RUNS=${1:-11}
NATM=${NATM:-target/release/natm}
D=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HOST=$(free_port); PORT=$(free_port)
cat > "$D/switch.toml" <<T
[[port]]
name = "h1"
bind = "127.0.0.1:$PORT"
peer = "127.0.0.1:$HOST"
mode = "frame"
signalling = "host"
ilmi_prefix = "47.0005.80ffe1000000f21a26d8"
T
"$NATM" switch --config "$D/switch.toml" > "$D/switch.out" 2> "$D/switch.log" &
PIDS+=($!)
mkdir -p "$D/h"
echo "start→link_up_ms link_up→address_ms"
for i in $(seq 1 "$RUNS"); do
  "$NATM" sigd --signalling "127.0.0.1:$HOST" --switch "127.0.0.1:$PORT" \
    --socket "$D/h/sigd.sock" --capacity 1Gbps --tpdu-cost-ns 1000 2> "$D/h/log$i" &
  P=$!
  # Bounded: 10 s at most for the address to show in the log.
  for _ in $(seq 1 1000); do
    grep -q "ILMI: the switch took" "$D/h/log$i" && break
    sleep 0.01
  done
  kill "$P"; wait "$P" 2>/dev/null || true
  python3 - "$D/h/log$i" <<'PY'
import datetime, re, sys
t = {}
for line in open(sys.argv[1]):
    stamp = re.sub(r"Z$", "+00:00", line.split()[0]) if line.strip() else ""
    for k, pat in (("start", "sigd serving"), ("up", "signalling link up"), ("addr", "ILMI: the switch took")):
        if pat in line and k not in t:
            t[k] = datetime.datetime.fromisoformat(stamp)
ms = lambda a, b: (t[b] - t[a]).total_seconds() * 1e3
print("%.3f %.3f" % (ms("start", "up"), ms("up", "addr")) if "addr" in t else "no address")
PY
done
echo "registrations at the switch: $(grep -c 'ILMI: address registered' "$D/switch.log")"
