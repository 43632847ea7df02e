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
. /tests/clip-lib.sh
modprobe clip || { echo "NATM-GUEST fail modprobe clip"; exit 1; }
atmtcp virtual connect 10.0.2.2 "$natm_port" bg >/dev/null 2>&1 ||
  { echo "NATM-GUEST fail atmtcp connect 10.0.2.2:$natm_port"; exit 1; }
clip_atm0
atmarp -s "$natm_peer" "0.0.$natm_vci" ||
  { echo "NATM-GUEST fail atmarp -s $natm_peer 0.0.$natm_vci"; exit 1; }
clip_serve
echo "NATM-GUEST clip-up mtu=$(cat /sys/class/net/atm0/mtu)"

# The host pings this guest and fetches seq.txt, then /cgi-bin/go.
clip_wait_go

clip_ping ping-clip "$natm_peer"
clip_ping ping-eth 10.0.2.2

clip_blob

clip_tables
sleep "${natm_linger:-60}"
