# Classical IP over ATM (RFC 2225, RFC 2684 LLC/SNAP) between Linux CLIP and
# `natm ip` on a PVC (tests/linuxatm_clip.rs). Interface 0 connects to the natm
# switch's listening atmtcp port, host 127.0.0.1:$natm_port (10.0.2.2 under slirp).
# atmarpd runs, `atmarp -c` makes the CLIP interface atm0 with $natm_ip/24, and
# `atmarp -s $natm_peer 0.0.$natm_vci` the LLC/SNAP PVC to natm. httpd serves
# /seq.txt (`seq 1 $natm_seq`) and /cgi-bin/go, which the host fetches when it has
# pinged this guest; then this guest pings natm over CLIP and (for comparison) slirp's
# gateway over its virtio-net, and takes what the host sends to its TCP port 7001 (busybox
# nc; its static wget died with SIGSEGV in this guest).
# Markers: clip-up, go, ping-clip rc=N, ping-eth rc=N, blob rc=N md5=HEX len=N,
# arp ..., atmarpd ..., done.
: "${natm_port:?}" "${natm_vci:?}" "${natm_ip:?}" "${natm_peer:?}"
count="${natm_count:-20}"
modprobe clip || { echo "NATM-GUEST fail modprobe clip"; exit 1; }
atmtcp virtual connect 10.0.2.2 "$natm_port" bg >/dev/null 2>&1 ||
  { echo "NATM-GUEST fail atmtcp connect 10.0.2.2:$natm_port"; exit 1; }
# -d: atmarpd's debug log shows the (In)ATMARP packets it handles.
atmarpd -b -d -l /tmp/atmarpd.log ||
  { echo "NATM-GUEST fail atmarpd"; exit 1; }
i=0
until [ -e /proc/net/atm/arp ] || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
atmarp -c atm0 || { echo "NATM-GUEST fail atmarp -c atm0"; exit 1; }
ip addr add "$natm_ip/24" dev atm0
ip link set atm0 up
atmarp -s "$natm_peer" "0.0.$natm_vci" ||
  { echo "NATM-GUEST fail atmarp -s $natm_peer 0.0.$natm_vci"; exit 1; }
mkdir -p /www/cgi-bin
seq 1 "${natm_seq:-40000}" >/www/seq.txt
printf '#!/bin/sh\ntouch /tmp/go\nprintf "Content-Type: text/plain\\r\\n\\r\\ngo\\n"\n' \
  >/www/cgi-bin/go
chmod 755 /www/cgi-bin/go
httpd -p "$natm_ip:8080" -h /www || { echo "NATM-GUEST fail httpd"; exit 1; }
timeout 300 nc -l -p 7001 </dev/null >/tmp/blob &
nc_pid=$!
echo "NATM-GUEST clip-up mtu=$(cat /sys/class/net/atm0/mtu)"

# The host pings this guest and fetches seq.txt, then /cgi-bin/go.
i=0
until [ -e /tmp/go ] || [ $i -ge 1200 ]; do sleep 0.1; i=$((i + 1)); done
echo "NATM-GUEST go"

# Each ping's output is shown line by line (the host reads the times), then its status.
pings() {
  ping -c "$count" -i 0.2 -W 5 "$2" >/tmp/ping.out 2>&1
  rc=$?
  sed "s/^/NATM-GUEST $1-out /" /tmp/ping.out
  echo "NATM-GUEST $1 rc=$rc"
}
pings ping-clip "$natm_peer"
pings ping-eth 10.0.2.2

wait "$nc_pid"
rc=$?
echo "NATM-GUEST blob rc=$rc md5=$(md5sum </tmp/blob | cut -d' ' -f1) len=$(wc -c </tmp/blob)"

atmarp -a 2>&1 | sed 's/^/NATM-GUEST arp /'
cat /proc/net/atm/vc | sed 's/^/NATM-GUEST vc /'
grep -iE 'inarp|InARP|arp_(request|reply)|vcc|learn|inverse' /tmp/atmarpd.log | head -40 |
  sed 's/^/NATM-GUEST atmarpd /'
echo "NATM-GUEST done"
sleep "${natm_linger:-60}"
