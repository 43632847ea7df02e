# Classical IP over ATM over SVCs (RFC 2225's normal mode) between Linux and
# `natm ip` (tests/linuxatm_clip_svc.rs). atmsigd runs the user side of UNI 3.1 over
# the atmtcp link to the natm switch as $natm_addr; atmarpd runs the CLIP interface
# atm0 with $natm_ip/24. $natm_role is `client` (`atmarp -s ... arpsrv`: natm ip at
# $natm_server is the ATMARP server) or `server` (no server configured: atmarpd is
# the subnet's server, and natm ip registers with it). Every VC is set up on demand.
# The guest pings natm, then waits for the host's ping and HTTP fetches (it touches
# /tmp/go through /cgi-bin/go), then takes what the host sends to its TCP port 7001.
# Markers: sigd up, clip-up mtu=N, ping-clip-out ..., ping-clip rc=N, go,
# blob rc=N md5=HEX len=N, arp ..., vc ..., atmarpd ..., done.
: "${natm_port:?}" "${natm_addr:?}" "${natm_ip:?}" "${natm_peer:?}" "${natm_role:?}"
count="${natm_count:-20}"
. /tests/clip-lib.sh
modprobe clip || { echo "NATM-GUEST fail modprobe clip"; exit 1; }
atmtcp virtual connect 10.0.2.2 "$natm_port" bg >/dev/null 2>&1 ||
  { echo "NATM-GUEST fail atmtcp connect 10.0.2.2:$natm_port"; exit 1; }
atmaddr -a 0 "$natm_addr" || echo "NATM-GUEST fail atmaddr"
atmsigd -d -l /tmp/sigd.log -m user -u uni31 0.0.5 &
i=0
until grep -q "entering state 4" /tmp/sigd.log 2>/dev/null || [ $i -ge 100 ]; do
  sleep 0.1; i=$((i + 1))
done
grep -q "entering state 4" /tmp/sigd.log && echo "NATM-GUEST sigd up" ||
  { echo "NATM-GUEST fail sigd link"; exit 1; }
clip_atm0
if [ "$natm_role" = client ]; then
  : "${natm_server:?}"
  atmarp -s "$natm_peer" "$natm_server" arpsrv ||
    { echo "NATM-GUEST fail atmarp -s $natm_peer $natm_server arpsrv"; exit 1; }
else
  # natm ip registers its address with this server: wait for it (a minute at most).
  i=0
  until atmarp -a 2>/dev/null | grep -q "IP $natm_peer," || [ $i -ge 600 ]; do
    sleep 0.1; i=$((i + 1))
  done
fi
clip_serve
echo "NATM-GUEST clip-up mtu=$(cat /sys/class/net/atm0/mtu)"

# Linux first: atmarpd resolves natm's address (with natm's server, or from natm's
# registration with this one) and calls it.
clip_ping ping-clip "$natm_peer"

# The host pings this guest and fetches seq.txt, then /cgi-bin/go.
clip_wait_go

clip_blob

clip_tables
sleep "${natm_linger:-60}"
