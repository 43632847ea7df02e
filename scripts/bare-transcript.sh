#!/usr/bin/env bash
# The bare AAL5 VC transcript of docs/tools.md: two sigds on loopback, then natm
# call/listen with transport=none (a shaped file, an unshaped load, an oversize
# message) and a PVC host to host with no sigd.
# Usage: scripts/bare-transcript.sh > transcript.txt   (builds natm in release first)
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin natm >&2 || exit 1
N="$PWD/${CARGO_TARGET_DIR:-target}/release/natm"
D=/tmp/natm-bare-transcript
rm -rf "$D" && mkdir -p "$D" && cd "$D" || exit 1
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; rm -rf "$D"' EXIT
$N sigd --address +4420001 --signalling 127.0.0.1:29301 --socket $D/a.sock --route +4420002=127.0.0.1:29302 --capacity 300Mbps 2>a.log &
PIDS+=($!)
$N sigd --address +4420002 --signalling 127.0.0.1:29302 --socket $D/b.sock --route +4420001=127.0.0.1:29301 --capacity 300Mbps 2>b.log &
PIDS+=($!)
sleep 1
head -c 10000000 /dev/urandom > big.bin
echo '$ natm listen ttcp --qos cbr:pcr=100Mbps,transport=none --out copy.bin   # host B'
echo '$ natm call +4420002:ttcp --qos cbr:pcr=100Mbps,transport=none --file big.bin'
NATM_SIGD=$D/b.sock $N listen ttcp --qos cbr:pcr=100Mbps,transport=none --out copy.bin 2>lb.err &
L=$!; sleep 0.5
NATM_SIGD=$D/a.sock $N call +4420002:ttcp --qos cbr:pcr=100Mbps,transport=none --file big.bin 2>&1
wait $L; echo "# host B's listener printed:"; sed 's/^/  /' lb.err
cmp big.bin copy.bin && echo '$ cmp big.bin copy.bin && echo same' && echo same
echo
echo '$ natm listen load --discard --json   # host B'
echo '$ natm call +4420002:load --qos ubr:transport=none --bytes 100MB --json'
NATM_SIGD=$D/b.sock $N listen load --discard --json > lb.json 2>lb.err &
L=$!; sleep 0.5
NATM_SIGD=$D/a.sock $N call +4420002:load --qos ubr:transport=none --bytes 100MB --json 2>&1
wait $L; echo "# host B's listener printed:"; sed 's/^/  /' lb.err; sed 's/^/  /' lb.json
echo
echo '$ natm call +4420002:load --qos ubr:transport=none --size 10000 --bytes 1MB'
NATM_SIGD=$D/b.sock $N listen load --discard 2>lb.err &
L=$!; sleep 0.5
NATM_SIGD=$D/a.sock $N call +4420002:load --qos ubr:transport=none --size 10000 --bytes 1MB 2>&1; echo "exit status $?"
kill $L 2>/dev/null; wait $L 2>/dev/null
echo
echo '# A PVC between two hosts, no sigd involved'
echo '$ natm listen --pvc 0.100 --bind 127.0.0.1:29402 --via 127.0.0.1:29401 --idle 1s --out pvc.bin   # host B'
echo '$ natm call --pvc 0.100 --via 127.0.0.1:29402 --bind 127.0.0.1:29401 --qos cbr:pcr=50Mbps,transport=none --file big.bin'
$N listen --pvc 0.100 --bind 127.0.0.1:29402 --via 127.0.0.1:29401 --idle 1s --out pvc.bin 2>lb.err &
L=$!; sleep 0.5
$N call --pvc 0.100 --via 127.0.0.1:29402 --bind 127.0.0.1:29401 --qos cbr:pcr=50Mbps,transport=none --file big.bin 2>&1
wait $L; echo "# host B's listener printed:"; sed 's/^/  /' lb.err
cmp big.bin pvc.bin && echo '$ cmp big.bin pvc.bin && echo same' && echo same
