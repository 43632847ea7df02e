#!/usr/bin/env bash
# The package's units started by a real systemd (issue 32): a Debian container booted
# by systemd-nspawn with systemd as its PID 1, the package installed in it with dpkg,
# and natm-sigd, natm-ip and natm-switch started, crashed, restarted and stopped with
# systemctl, every sandboxing line of their units in force (the user, no or one
# capability, the system-call filter, a read-only system, DevicePolicy).
#
#   unshare --mount --fork bash scripts/package-systemd-test.sh DEB
#
# Run by scripts/package-test.sh with CI=true, as root. The container has a network of
# its own (only its loopback) and its own /run; the mount namespace unshare gives
# makes the tmpfs nspawn needs under /run ours alone. The Debian tree it boots is
# made once per machine with debootstrap (about 40 s, from the Debian mirror apt uses)
# and kept outside the checkout, in /var/cache/natm/systemd-root (or
# $NATM_SYSTEMD_CACHE), as apt keeps its packages, so that a clean checkout's CI run
# does not make it again; every run boots a copy. Prints one "ok"/"FAIL" line per
# check; exits 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

deb=$(realpath "$1")
[ "$(id -u)" = 0 ] || { echo "package-systemd-test: run as root" >&2; exit 1; }
for t in systemd-nspawn debootstrap nsenter; do
  command -v "$t" >/dev/null || { echo "package-systemd-test: no $t" >&2; exit 1; }
done

mount --make-rprivate /
# nspawn keeps its mount propagation directory under /run/systemd/nspawn and will
# only ever delete it on a tmpfs; these machines' /run is a disk.
mount -t tmpfs -o mode=0755 natm-nspawn-run /run

cache=${NATM_SYSTEMD_CACHE:-/var/cache/natm/systemd-root}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
mirror=${NATM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ ! -x "$cache/$suite/usr/lib/systemd/systemd" ]; then
  mkdir -p "$cache"
  rm -rf "$cache/$suite.partial"
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus "$suite" \
    "$cache/$suite.partial" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  rm -rf "${cache:?}/$suite"
  mv "$cache/$suite.partial" "$cache/$suite"
fi

work=$(mktemp -d -p "$PWD/target" systemd-run.XXXXXX)
root=$work/root
cp -a "$cache/$suite" "$root"
nspawn_pid=
cleanup() {
  if [ -n "$nspawn_pid" ]; then
    # SIGTERM asks the container's systemd to shut down in order.
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    timeout 30 tail --pid="$nspawn_pid" -f /dev/null || kill -KILL "$nspawn_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

nspawn=(systemd-nspawn -q -D "$root" --register=no --keep-unit)
cp "$deb" "$root/natm.deb"
"${nspawn[@]}" dpkg -i /natm.deb >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log" >&2; exit 1; }

failed=0
ok() { echo "ok    $1"; }
fail() {
  echo "FAIL  $1"
  shift
  printf '%s\n' "$@" | sed 's/^/      /'
  failed=1
}
# within SECONDS COMMAND...: runs COMMAND until it succeeds, at most SECONDS.
within() {
  local until=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$until" ] || return 1
    sleep 0.1
  done
}

mkdir -p "$root/etc/natm"
printf 'addresses = ["+4420001"]\n' >"$root/etc/natm/sigd.toml"
printf 'address = "+4420001"\nipv4 = "10.77.0.1/24"\narp_server = true\n' >"$root/etc/natm/ip.toml"
cat >"$root/etc/natm/switch.toml" <<'EOF'
key_file = "/var/lib/natm/switch.noise-key"
known_peers_file = "/var/lib/natm/switch.known-peers"
[[port]]
name = "h"
bind = "127.0.0.1:29104"
peer = "127.0.0.1:29004"
mode = "frame"
signalling = "host"
EOF

# The TUN device as a Debian host has it (0666: the capability is what is checked);
# this machine's own may be root's alone.
mknod -m 666 "$work/tun" c 10 200
# nspawn's own system-call filter (systemd 252) lacks Landlock's three calls, which a
# host's systemd grants a service; the units' filters are what is tested.
"${nspawn[@]}" --boot --private-network --bind="$work/tun:/dev/net/tun" \
  --system-call-filter="landlock_create_ruleset landlock_add_rule landlock_restrict_self" \
  >"$work/console.log" 2>&1 </dev/null &
nspawn_pid=$!
leader() { pgrep -P "$nspawn_pid" -x systemd; }
if within 60 leader; then
  init=$(leader)
else
  fail "systemd-nspawn boots the container" "$(tail -n 20 "$work/console.log")"
  exit 1
fi
in=(nsenter -t "$init" -a)
# systemctl reaches PID 1 through its private socket, made early in the boot.
within 60 "${in[@]}" test -S /run/systemd/private || true
state=$(timeout 120 "${in[@]}" systemctl is-system-running --wait 2>&1 || true)
if [[ $state == running || $state == degraded ]]; then
  ok "systemd boots the container with the package installed ($state)"
else
  fail "systemd boots the container" "$state" "$(tail -n 20 "$work/console.log")"
  exit 1
fi

main_pid() { "${in[@]}" systemctl show -P MainPID "$1"; }
status_of() { "${in[@]}" grep -E "^$2:" "/proc/$1/status" | awk '{print $2}'; }
journal() { "${in[@]}" journalctl -b -q --no-pager -o cat -u "$1"; }
journal_has() { journal "$1" | grep -q -- "$2"; }

# sigd: natm, no capability, filtered, a read-only system; it serves calls.
"${in[@]}" systemctl start natm-sigd
if within 20 "${in[@]}" natm stat; then
  pid=$(main_pid natm-sigd)
  got="user $(status_of "$pid" Uid) caps $(status_of "$pid" CapEff)/$(status_of "$pid" CapBnd)"
  got+=" nnp $(status_of "$pid" NoNewPrivs) seccomp $(status_of "$pid" Seccomp)"
  uid=$("${in[@]}" id -u natm)
  if [ "$got" = "user $uid caps 0000000000000000/0000000000000000 nnp 1 seccomp 2" ]; then
    ok "natm-sigd.service runs sigd as natm, no capability, no new privileges, a system-call filter"
  else
    fail "natm-sigd.service runs sigd as natm with no capability" "$got"
  fi
  if journal_has natm-sigd "Landlock sandbox enforced"; then
    ok "sigd sandboxes itself with Landlock under its unit's system-call filter"
  else
    fail "sigd sandboxes itself with Landlock" "$(journal natm-sigd | tail -n 20)"
  fi
  # $pid is the container's number for sigd: nsenter from inside the container.
  ro=$("${in[@]}" nsenter -t "$pid" -m sh -c \
    'for f in /usr/natm-write-test /etc/natm-write-test; do touch $f 2>&1; done' || true)
  if [ "$(grep -c "Read-only file system" <<<"$ro")" = 2 ]; then
    ok "sigd's /usr and /etc are read-only (ProtectSystem=strict)"
  else
    fail "sigd's /usr and /etc are read-only" "$ro"
  fi
else
  fail "natm-sigd.service starts and serves natm stat" "$(journal natm-sigd | tail -n 20)"
fi

"${in[@]}" timeout 30 natm listen --echo ping >"$work/listen.log" 2>&1 &
listen=$!
if within 10 "${in[@]}" sh -c 'natm stat | grep -qw ping' &&
  out=$("${in[@]}" timeout 20 natm ping +4420001:ping --count 3 2>&1) &&
  grep -q "3 probes sent, 3 received" <<<"$out"; then
  ok "a call through the unit's sigd: natm ping to an echo listener, 3 of 3 answered"
else
  fail "a call through the unit's sigd answers natm ping" "${out:-}" "$(cat "$work/listen.log")"
fi
kill "$listen" 2>/dev/null || true
wait "$listen" 2>/dev/null || true

# A crash: systemd starts sigd again (Restart=on-failure), with the same key.
key=$("${in[@]}" cat /var/lib/natm/sigd.noise-key)
old=$(main_pid natm-sigd)
"${in[@]}" sh -c "kill -KILL $old"
restarted() { p=$(main_pid natm-sigd) && [ "$p" != 0 ] && [ "$p" != "$old" ] && "${in[@]}" natm stat; }
if within 30 restarted && [ "$("${in[@]}" cat /var/lib/natm/sigd.noise-key)" = "$key" ]; then
  ok "sigd killed: systemd restarts it, serving with the same key (StateDirectory)"
else
  fail "sigd killed: systemd restarts it with the same key" "$(journal natm-sigd | tail -n 20)"
fi

# natm ip: natm with CAP_NET_ADMIN alone, /dev/net/tun its one device.
"${in[@]}" systemctl start natm-ip
if within 30 journal_has natm-ip "natm0 up" &&
  "${in[@]}" test -d /sys/class/net/natm0; then
  pid=$(main_pid natm-ip)
  caps="$(status_of "$pid" CapEff)/$(status_of "$pid" CapBnd)"
  if [ "$caps" = "0000000000001000/0000000000001000" ]; then
    ok "natm-ip.service brings natm0 up as natm with CAP_NET_ADMIN alone"
  else
    fail "natm-ip.service holds CAP_NET_ADMIN alone" "$caps"
  fi
else
  fail "natm-ip.service brings natm0 up" "$(journal natm-ip | tail -n 20)"
fi

# The switch: its key in /var/lib/natm, its counters in its runtime directory.
"${in[@]}" systemctl start natm-switch
if within 30 journal_has natm-switch "switch forwarding" &&
  within 10 "${in[@]}" test -s /run/natm-switch/switch.json &&
  [ "$("${in[@]}" stat -c %U:%a /var/lib/natm/switch.noise-key)" = natm:600 ]; then
  ok "natm-switch.service forwards, its key natm's 0600, its counters in /run/natm-switch"
  if journal_has natm-switch "Landlock sandbox enforced"; then
    ok "the switch sandboxes itself with Landlock under its unit's system-call filter"
  else
    fail "the switch sandboxes itself with Landlock" "$(journal natm-switch | tail -n 20)"
  fi
else
  fail "natm-switch.service forwards" "$(journal natm-switch | tail -n 20)"
fi

# Stopping: each ends on SIGTERM without failing; sigd removes its socket.
"${in[@]}" systemctl stop natm-switch natm-ip natm-sigd
states=$("${in[@]}" systemctl show -P ActiveState natm-switch natm-ip natm-sigd | xargs)
results=$("${in[@]}" systemctl show -P Result natm-switch natm-ip natm-sigd | xargs)
if [ "$states" = "inactive inactive inactive" ] && [ "$results" = "success success success" ] &&
  ! "${in[@]}" test -e /run/natm/sigd.sock; then
  ok "systemctl stop ends all three cleanly (Result=success), sigd's socket removed"
else
  fail "systemctl stop ends all three cleanly" "states: $states" "results: $results" \
    "$(journal natm-sigd | tail -n 5)"
fi
exit "$failed"
