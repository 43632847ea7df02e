#!/usr/bin/env bash
# Whether what the installed units grant is enough, and needed (issue 32): sigd as the
# natm user with no capability serves the default socket /run/natm/sigd.sock and keeps
# its key in /var/lib/natm; `natm ip` as natm with CAP_NET_ADMIN alone brings natm0
# up and binds the root SAPs `ip` and `atmarp` (it is sigd's own user); another user
# with the same capability may not bind them, and natm without it gets no TUN; the
# switch as natm without capabilities keeps its key in /var/lib/natm and its counters
# in /run/natm-switch.
#
# Run by scripts/package-test.sh after `dpkg -i` (CI=true), as root, as
#   unshare --mount --net --fork bash scripts/package-units-test.sh
# so that /dev, /run, /var/lib/natm and the network are this run's own: nothing is
# left on the machine. setpriv stands in for the units' User= and capability lines:
# scripts/package-systemd-test.sh starts the units under systemd itself, and this
# covers what a booted container does not (another user, a missing capability).
# Prints one "ok"/"FAIL" line per check; exits 1 if any failed.
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "package-units-test: run as root" >&2; exit 1; }
getent passwd natm >/dev/null || { echo "package-units-test: no natm user: install the package" >&2; exit 1; }

mount --make-rprivate /
# A /dev of our own: the machine's /dev/net/tun may be root's alone (0600), where a
# Debian host's is 0666; the capability, not the file mode, is what is checked.
mount -t tmpfs -o mode=0755 natm-dev /dev
mkdir /dev/net
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/urandom c 1 9
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/net/tun c 10 200
# The units' directories, as systemd would make them (RuntimeDirectory, StateDirectory).
mount -t tmpfs -o mode=0755 natm-run /run
install -d -o natm -g natm -m 0755 /run/natm
mount -t tmpfs -o mode=0755 natm-lib /var/lib
install -d -o natm -g natm -m 0750 /var/lib/natm
ip link set lo up

work=$(mktemp -d -p /run)
chmod 0755 "$work"
printf 'addresses = ["+4420001"]\n' >"$work/sigd.toml"
printf 'address = "+4420001"\nipv4 = "10.77.0.1/24"\narp_server = true\n' >"$work/ip.toml"
chmod 0644 "$work"/*.toml

failed=0
ok() { echo "ok    $1"; }
fail() {
  echo "FAIL  $1"
  shift
  printf '%s\n' "$@" | sed 's/^/      /'
  failed=1
}

# Starts COMMAND in the background with its stderr in a FIFO and waits (at most 10 s)
# for a line matching PATTERN or for the command to end: that line is left in $line,
# the command's pid in $started.
start_and_wait_for() {
  local pattern=$1 fifo
  shift
  fifo=$(mktemp -u -p "$work")
  mkfifo "$fifo"
  "$@" 2>"$fifo" >/dev/null &
  started=$!
  line=$(timeout 10 grep -m1 -E "$pattern" <"$fifo" || true)
  rm -f "$fifo"
}
stop_started() {
  kill "$started" 2>/dev/null || true
  wait "$started" 2>/dev/null || true
}

as_natm=(setpriv --reuid natm --regid natm --init-groups)
no_caps=(--inh-caps -all --ambient-caps -all --bounding-set -all)
net_admin=(--inh-caps -all,+net_admin --ambient-caps -all,+net_admin --bounding-set -all,+net_admin)

start_and_wait_for "sigd serving|natm:" "${as_natm[@]}" "${no_caps[@]}" \
  natm sigd --config "$work/sigd.toml" --tpdu-cost-ns 2000
sigd=$started
if [[ $line == *"sigd serving"* && -S /run/natm/sigd.sock ]] &&
  [ "$(stat -c %U /var/lib/natm/sigd.noise-key)" = natm ] &&
  [ "$(stat -c %a /var/lib/natm/sigd.noise-key)" = 600 ]; then
  ok "sigd as natm with no capability serves /run/natm/sigd.sock, its key natm's 0600 in /var/lib/natm"
else
  fail "sigd as natm with no capability serves /run/natm/sigd.sock" "$line" "$(ls -la /run/natm /var/lib/natm 2>&1)"
fi
if out=$(setpriv --reuid nobody --regid nogroup --clear-groups natm stat 2>&1) &&
  grep -q "+4420001" <<<"$out"; then
  ok "another user reaches that sigd (natm stat)"
else
  fail "another user reaches that sigd (natm stat)" "$out"
fi

start_and_wait_for "natm0 up|natm:" "${as_natm[@]}" "${net_admin[@]}" \
  natm ip --config "$work/ip.toml"
stop_started
if [[ $line == *"natm0 up"*"ATMARP server +4420001 (this host)"* ]]; then
  ok "natm ip as natm with CAP_NET_ADMIN alone: natm0 up, ATMARP served on the root SAP"
else
  fail "natm ip as natm with CAP_NET_ADMIN alone brings natm0 up" "$line"
fi

start_and_wait_for "natm0 up|natm:" setpriv --reuid nobody --regid nogroup --clear-groups \
  "${net_admin[@]}" natm ip --config "$work/ip.toml"
stop_started
if [[ $line == *"root service"* ]]; then
  ok "another user with CAP_NET_ADMIN may not bind the root SAPs"
else
  fail "another user with CAP_NET_ADMIN may not bind the root SAPs" "$line"
fi

start_and_wait_for "natm0 up|natm:" "${as_natm[@]}" "${no_caps[@]}" \
  natm ip --config "$work/ip.toml"
stop_started
if [[ $line == *"cannot create TUN interface"* ]]; then
  ok "natm ip without CAP_NET_ADMIN gets no TUN interface"
else
  fail "natm ip without CAP_NET_ADMIN gets no TUN interface" "$line"
fi

kill -TERM "$sigd"
wait "$sigd" || true

# The switch as natm-switch.service runs it: its keys where its configuration must put
# them, its counters through --stat-json in its runtime directory (written a last
# time when it stops).
install -d -o natm -g natm -m 0755 /run/natm-switch
cat >"$work/switch.toml" <<'EOF'
key_file = "/var/lib/natm/switch.noise-key"
known_peers_file = "/var/lib/natm/switch.known-peers"
[[port]]
name = "h"
bind = "127.0.0.1:29104"
peer = "127.0.0.1:29004"
mode = "frame"
signalling = "host"
EOF
chmod 0644 "$work/switch.toml"
start_and_wait_for "switch forwarding|natm:" "${as_natm[@]}" "${no_caps[@]}" \
  natm switch --config "$work/switch.toml" --stat-json /run/natm-switch/switch.json
kill -TERM "$started" 2>/dev/null || true
wait "$started" 2>/dev/null || true
if [[ $line == *"switch forwarding"* ]] &&
  [ "$(stat -c %U /run/natm-switch/switch.json 2>/dev/null)" = natm ] &&
  [ "$(stat -c %U:%a /var/lib/natm/switch.noise-key 2>/dev/null)" = natm:600 ]; then
  ok "the switch as natm with no capability forwards, its key natm's 0600, its counters in /run/natm-switch"
else
  fail "the switch as natm with no capability forwards" "$line" "$(ls -la /run/natm-switch /var/lib/natm 2>&1)"
fi
exit "$failed"
