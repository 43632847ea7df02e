#!/usr/bin/env bash
# The shell transcript of docs/tools.md: two sigds on loopback, natm listen/call moving
# a file and a generated load at each service class, traffic in natm stat and an
# administrator's release, stdin to stdout, ping, refusals.
# Every command shown is the command run; the output is what it printed.
# Usage: scripts/tools-transcript.sh > transcript.txt   (builds natm in release first)
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin natm >&2 || exit 1
PATH="$PWD/${CARGO_TARGET_DIR:-target}/release:$PATH"
D=/tmp/natm-tools
rm -rf "$D" && mkdir -p "$D" && cd "$D" || exit 1
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null' EXIT

# Print a command, run it, print what it printed (stdout and stderr).
show() { echo "\$ $*"; "$@" 2>&1; echo; }
# Host B's listener in the background; what it prints is shown after the call.
listen_b() {
  echo "\$ NATM_SIGD=$D/b.sock natm listen $* &"
  NATM_SIGD=$D/b.sock natm listen "$@" >listen.out 2>&1 &
  LPID=$!
  sleep 0.4
}
listener_said() {
  wait "$LPID"
  echo "# host B's listener printed:"
  sed 's/^/  /' listen.out
  echo
}
stop_listener() {
  kill "$LPID" 2>/dev/null
  wait "$LPID" 2>/dev/null
}

echo '```console'
for h in "a 29101 +4420001 29102 +4420002" "b 29102 +4420002 29101 +4420001"; do
  set -- $h
  args=(sigd --address "$3" --signalling "127.0.0.1:$2" --socket "$D/$1.sock"
    --route "$5=127.0.0.1:$4" --capacity 300Mbps)
  echo "\$ natm ${args[*]} 2>$1.log &"
  natm "${args[@]}" 2>"$1.log" &
  PIDS+=($!)
done
sleep 1.5
echo "\$ export NATM_SIGD=$D/a.sock    # host A's commands; host B's name b.sock"
export NATM_SIGD=$D/a.sock
echo "\$ head -c 10000000 /dev/urandom > big.bin"
head -c 10000000 /dev/urandom >big.bin
echo
echo '# A file at each service class'
for q in reliable ubr cbr:pcr=200Mbps; do
  listen_b ttcp --qos "$q" --out copy.bin
  show natm call +4420002:ttcp --qos "$q" --file big.bin
  listener_said
  show cmp big.bin copy.bin
done
echo '# Generated load, 100 MB at each class (the listener: a JSON summary)'
for q in reliable ubr cbr:pcr=200Mbps; do
  listen_b load --discard --json
  show natm call +4420002:load --qos "$q" --bytes 100MB
  listener_said
done
echo '# Best effort paced (--rate) below what the receiver drops'
listen_b load --discard
show natm call +4420002:load --qos ubr --bytes 100MB --rate 1Gbps --json
listener_said
echo '# The reservation while a guaranteed call runs'
listen_b load --discard --quiet
echo "\$ natm call +4420002:load --qos cbr:pcr=100Mbps --bytes 25MB --quiet &"
natm call +4420002:load --qos cbr:pcr=100Mbps --bytes 25MB --quiet >call.out 2>&1 &
CPID=$!
sleep 1
show natm stat
wait "$CPID"
sed 's/^/  /' call.out
echo
listener_said
echo '# stdin to stdout'
listen_b chat
echo "\$ echo 'hello through sigd' | natm call +4420002:chat --quiet"
echo 'hello through sigd' | natm call +4420002:chat --quiet 2>&1
echo
listener_said
echo '# ping (to an echo listener; the SAP defaults to echo)'
listen_b echo --echo --quiet
show natm ping +4420002 -c 5 -i 200ms
listener_said
echo "# Each call's traffic as its application reports it, live, and an administrator's release"
listen_b load --discard --quiet
echo "\$ natm call +4420002:load --bytes 10GB --rate 50Mbps --quiet &"
natm call +4420002:load --bytes 10GB --rate 50Mbps --quiet >call.out 2>&1 &
CPID=$!
sleep 2.5
show natm stat
show natm stat --watch --interval 1s --count 2
ID=$(natm stat --json | grep -o '"id":"[0-9a-f]*"' | head -1 | cut -d'"' -f4)
echo "\$ chmod a+w \$NATM_SIGD    # let another user reach sigd, to be refused by it"
chmod a+w "$NATM_SIGD"
show setpriv --reuid 1000 --regid 1000 --clear-groups natm release "$ID"
show natm release "$ID" --cause 31
wait "$CPID"
echo "# the caller printed:"
sed 's/^/  /' call.out
echo
listener_said
echo '# Refusals: the UNI cause and what to do (exit status 1)'
show natm call +4420002:nobody
listen_b ttcp --quiet
show natm call +4420002:ttcp --qos cbr:pcr=400Mbps
show natm call +4420009:ttcp
stop_listener
listen_b ttcp --qos cbr:pcr=10Mbps
show natm call +4420002:ttcp --qos cbr:pcr=20Mbps
stop_listener
echo "# host B's listener printed:"
sed 's/^/  /' listen.out
echo '```'
