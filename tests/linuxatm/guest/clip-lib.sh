# What the CLIP guest tests share (clip.sh on a PVC, clipsvc.sh on SVCs); sourced,
# not a test of its own.

# clip_atm0: atmarpd (-d: its log shows the (In)ATMARP packets it handles) and the
# CLIP interface atm0 with $natm_ip/24.
clip_atm0() {
  atmarpd -b -d -l /tmp/atmarpd.log || { echo "NATM-GUEST fail atmarpd"; exit 1; }
  i=0
  until [ -e /proc/net/atm/arp ] || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
  atmarp -c atm0 || { echo "NATM-GUEST fail atmarp -c atm0"; exit 1; }
  ip addr add "$natm_ip/24" dev atm0
  ip link set atm0 up
}

# clip_serve: httpd on $natm_ip:8080 with /seq.txt (`seq 1 $natm_seq`) and
# /cgi-bin/go (touches /tmp/go), and nc on TCP port 7001 writing /tmp/blob (its pid
# in $nc_pid).
clip_serve() {
  mkdir -p /www/cgi-bin
  seq 1 "${natm_seq:-40000}" >/www/seq.txt
  printf '#!/bin/sh\ntouch /tmp/go\nprintf "Content-Type: text/plain\\r\\n\\r\\ngo\\n"\n' \
    >/www/cgi-bin/go
  chmod 755 /www/cgi-bin/go
  httpd -p "$natm_ip:8080" -h /www || { echo "NATM-GUEST fail httpd"; exit 1; }
  timeout 300 nc -l -p 7001 </dev/null >/tmp/blob &
  nc_pid=$!
}

# clip_wait_go: waits (2 minutes at most) for the host's fetch of /cgi-bin/go.
clip_wait_go() {
  i=0
  until [ -e /tmp/go ] || [ $i -ge 1200 ]; do sleep 0.1; i=$((i + 1)); done
  echo "NATM-GUEST go"
}

# clip_blob: waits for nc, then reports what it took.
clip_blob() {
  wait "$nc_pid"
  rc=$?
  echo "NATM-GUEST blob rc=$rc md5=$(md5sum </tmp/blob | cut -d' ' -f1) len=$(wc -c </tmp/blob)"
}

# clip_ping NAME ADDR: pings ADDR $count times, 0.2 s apart; its output line by line
# (`NATM-GUEST NAME-out …`, the host reads the times), then `NATM-GUEST NAME rc=N`.
clip_ping() {
  ping -c "$count" -i 0.2 -W 5 "$2" >/tmp/ping.out 2>&1
  rc=$?
  sed "s/^/NATM-GUEST $1-out /" /tmp/ping.out
  echo "NATM-GUEST $1 rc=$rc"
}

# clip_tables: atmarp -a, the kernel's VCs and atmarpd's (In)ATMARP log lines, then
# `NATM-GUEST done`.
clip_tables() {
  atmarp -a 2>&1 | sed 's/^/NATM-GUEST arp /'
  sed 's/^/NATM-GUEST vc /' /proc/net/atm/vc
  grep -iE 'inarp|arp_(request|reply|nak)|incoming|learn|server|register|vcc' \
    /tmp/atmarpd.log | head -40 | sed 's/^/NATM-GUEST atmarpd /'
  echo "NATM-GUEST done"
}
