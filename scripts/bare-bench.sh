#!/usr/bin/env bash
# Bare AAL5 calls (ubr:transport=none) beside natm's best-effort transport (ubr) on
# the same path: two sigds on loopback, 100 MB in 8 KiB messages, five alternating
# runs of each; the listener's received Mbit/s, the fraction delivered and the
# receiving socket's drops. Usage: scripts/bare-bench.sh (after cargo build --release)
set -u
cd "$(dirname "$0")/.."
N="$PWD/${CARGO_TARGET_DIR:-target}/release/natm"
D=/tmp/natm-bare-bench
rm -rf "$D" && mkdir -p "$D" && cd "$D" || exit 1
$N sigd --address +4420001 --signalling 127.0.0.1:29501 --socket $D/a.sock --route +4420002=127.0.0.1:29502 --capacity 300Mbps 2>a.log &
A=$!
$N sigd --address +4420002 --signalling 127.0.0.1:29502 --socket $D/b.sock --route +4420001=127.0.0.1:29501 --capacity 300Mbps 2>b.log &
B=$!
sleep 1
cat /proc/loadavg
for i in 1 2 3 4 5; do
 for q in ubr ubr:transport=none; do
  NATM_SIGD=$D/b.sock timeout 20 $N listen load --discard --json --quiet > l.json 2>/dev/null &
  L=$!; sleep 0.4
  NATM_SIGD=$D/a.sock timeout 20 $N call +4420002:load --qos $q --bytes 100MB --size 8KiB --json --quiet > c.json 2>/dev/null
  wait $L
  python3 -c "
import json;c=json.load(open('c.json'));l=json.load(open('l.json'))
print('$q', 'send_mbps=%.0f'%c['mbit_per_s'], 'recv_mbps=%.0f'%l['mbit_per_s'], 'delivered=%.3f'%(l['bytes_received']/1e8), 'queue_drops=%s'%l['queue_drops'])"
 done
done
cat /proc/loadavg
kill $A $B; wait 2>/dev/null
rm -rf "$D"
