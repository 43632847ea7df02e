# SVCs between Linux's ATM stack and natm (tests/linuxatm.rs): the guest's atmtcp
# interface connects to the natm switch's atmtcp port, atmsigd runs the user side of
# UNI ($natm_uni: uni30, uni31 or uni40) over it as $natm_addr, then one Linux-ATM
# program runs ($natm_mode). Markers: "NATM-GUEST sigd up", "NATM-GUEST <mode> rc=N",
# and atmsigd's log between "NATM-GUEST sigd-log begin/end" at the end.
: "${natm_port:?}" "${natm_addr:?}" "${natm_mode:?}"
uni="${natm_uni:-uni31}"
atmtcp virtual connect 10.0.2.2 "$natm_port" bg >/dev/null 2>&1 ||
  { echo "NATM-GUEST fail atmtcp connect 10.0.2.2:$natm_port"; exit 1; }
if [ -n "${natm_ilmi:-}" ]; then
  # ILMI (issue 33): the interface's ESI is $natm_ilmi; ilmid learns the network
  # prefix from the switch, puts prefix + ESI + selector 0 in the kernel (atmsigd
  # takes it from there) and registers it with the switch.
  esi -f "$natm_ilmi" 0 || echo "NATM-GUEST fail esi"
  ilmid -d -l /tmp/ilmid.log 0 &
  i=0
  until [ -n "$(atmaddr 0 2>/dev/null)" ] || [ $i -ge 300 ]; do
    sleep 0.1; i=$((i + 1))
  done
  echo "NATM-GUEST ilmi addr $(atmaddr 0 2>/dev/null | tr '\n' ' ')"
else
  atmaddr -a 0 "$natm_addr" || echo "NATM-GUEST fail atmaddr"
fi
atmsigd -d -l /tmp/sigd.log -m user -u "$uni" 0.0.5 &
sigd=$!
# SSCF state 4 is "link up" (atmsigd -d logs it).
i=0
until grep -q "entering state 4" /tmp/sigd.log 2>/dev/null || [ $i -ge 100 ]; do
  sleep 0.1; i=$((i + 1))
done
grep -q "entering state 4" /tmp/sigd.log && echo "NATM-GUEST sigd up" ||
  echo "NATM-GUEST fail sigd link"
case "$natm_mode" in
  send)
    # svc_send: 50,000 PDUs of max_sdu octets on a UBR (or $natm_qos) SVC.
    if [ -n "${natm_qos:-}" ]; then
      timeout "${natm_limit:-20}" svc_send "$natm_to" "$natm_qos"
    else
      timeout "${natm_limit:-20}" svc_send "$natm_to"
    fi
    echo "NATM-GUEST send rc=$?"
    ;;
  recv)
    # svc_recv: accepts one call on B-HLI "FORE_ATM", reads until the sender ends.
    timeout 100 svc_recv &
    r=$!
    sleep 0.5
    echo "NATM-GUEST recv listening"
    wait $r
    echo "NATM-GUEST recv rc=$?"
    ;;
  ttcp-r)
    # ttcp_atm receives one call and writes what it reads to a file: its digest.
    timeout 100 ttcp_atm -r -a -l "${natm_len:-8192}" > /tmp/ttcp.out &
    r=$!
    sleep 0.5
    echo "NATM-GUEST ttcp-r listening"
    wait $r
    rc=$?
    # ttcp writes what it reads to stdout, and then its own report lines too: the
    # first $natm_bytes octets are the data.
    n="${natm_bytes:-0}"
    echo "NATM-GUEST ttcp-r tail: $(tail -c +$((n + 1)) /tmp/ttcp.out | tr '\n' ' ')"
    echo "NATM-GUEST ttcp-r rc=$rc bytes=$(wc -c < /tmp/ttcp.out) md5=$(head -c "$n" /tmp/ttcp.out | md5sum | cut -d' ' -f1)"
    ;;
  ttcp-t)
    # ttcp_atm sends $natm_n buffers of $natm_len on a $natm_qos SVC: read from a
    # random file (its digest printed) with natm_stdin=1, else its own pattern.
    n="${natm_n:-64}"; len="${natm_len:-8192}"; qos="${natm_qos:-cbr:pcr=2000}"
    if [ -n "${natm_stdin:-}" ]; then
      dd if=/dev/urandom of=/tmp/in bs="$len" count="$n" 2>/dev/null
      timeout 100 ttcp_atm -t -a -n "$n" -l "$len" -P "$qos" "$natm_to" < /tmp/in
      echo "NATM-GUEST ttcp-t rc=$? md5=$(md5sum < /tmp/in | cut -d' ' -f1)"
    else
      timeout 100 ttcp_atm -t -s -a -n "$n" -l "$len" -P "$qos" "$natm_to"
      echo "NATM-GUEST ttcp-t rc=$?"
    fi
    ;;
  cbr)
    # ttcp_atm -t on two CBR SVCs, each once the host's listener is up: $natm_n
    # buffers on $natm_qos, then $natm_n2 on $natm_qos2 (Linux's atmtcp interface
    # does not shape: it sends as fast as the guest writes). Markers "cbr I rc=N".
    len="${natm_len:-4096}"
    i=1
    for spec in "$natm_qos/$natm_n" "$natm_qos2/$natm_n2"; do
      q="${spec%/*}"; n="${spec##*/}"
      timeout 100 ttcp_atm -t -s -a -f m -n "$n" -l "$len" -P "$q" "$natm_to"
      echo "NATM-GUEST cbr $i rc=$?"
      i=$((i + 1))
      sleep "${natm_gap:-3}"
    done
    ;;
  bench)
    # Throughput, $natm_runs rounds of $natm_n buffers of $natm_len octets each way,
    # kernel TCP over slirp and ATM SVCs through the switch, each step after the
    # host said it is ready (it starts its end when it sees the marker; $natm_gap
    # gives it the time): ttcp_atm prints "ttcp-r:/ttcp-t: ... (X Mb/sec)".
    # $natm_rmem sets the default socket receive buffer (an accepted ATM socket
    # gets the default, not its listener's SO_RCVBUF).
    n="${natm_n:-2048}"; len="${natm_len:-8192}"; gap="${natm_gap:-2}"
    [ -n "${natm_rmem:-}" ] && echo "$natm_rmem" > /proc/sys/net/core/rmem_default
    echo "NATM-GUEST bench rmem_default=$(cat /proc/sys/net/core/rmem_default)"
    r=1
    while [ "$r" -le "${natm_runs:-3}" ]; do
      # TCP host -> guest: the host's ttcp_atm -t connects to the forwarded 2812.
      timeout 120 ttcp_atm -r -s -f m -l "$len" -p 2812 &
      t=$!
      sleep 0.5
      echo "NATM-GUEST bench $r tcp-r listening"
      wait $t
      echo "NATM-GUEST bench $r tcp-r rc=$?"
      # TCP guest -> host.
      echo "NATM-GUEST bench $r tcp-t soon"
      sleep "$gap"
      timeout 120 ttcp_atm -t -s -f m -n "$n" -l "$len" -p "$natm_tcp_port" 10.0.2.2
      echo "NATM-GUEST bench $r tcp-t rc=$?"
      # ATM guest -> natm listen, UBR SVC.
      echo "NATM-GUEST bench $r atm-t soon"
      sleep "$gap"
      timeout 120 ttcp_atm -t -s -a -f m -n "$n" -l "$len" -P ubr "$natm_to"
      rc=$?
      # A failed run: atmsigd's last words say who released the call and why.
      [ "$rc" -ne 0 ] && tail -30 /tmp/sigd.log | sed "s/^/NATM-GUEST bench $r sigd: /"
      echo "NATM-GUEST bench $r atm-t rc=$rc"
      # ATM natm call -> guest, UBR SVC. The interface's AAL5 counters around it
      # ("5 ( tx tx_err rx rx_err rx_drop )"): rx_drop counts SDUs the kernel
      # dropped because the socket's receive buffer was full.
      echo "NATM-GUEST bench $r atm-r before: $(grep atmtcp /proc/net/atm/devices)"
      timeout 120 ttcp_atm -r -s -a -f m -l "$len" &
      t=$!
      sleep 0.5
      echo "NATM-GUEST bench $r atm-r listening"
      wait $t
      echo "NATM-GUEST bench $r atm-r rc=$?"
      echo "NATM-GUEST bench $r atm-r after: $(grep atmtcp /proc/net/atm/devices)"
      r=$((r + 1))
    done
    ;;
  suite)
    # One boot per UNI variant: refusals, then natm calls svc_recv, then svc_send
    # calls natm. $natm_refuse: ";"-separated NSAP[/QOS] targets svc_send must fail
    # to reach; each prints "refuse I rc=N: <svc_send's words>".
    i=0
    for t in $(echo "${natm_refuse:-}" | tr ';' ' '); do
      to="${t%%/*}"; q="${t#*/}"; [ "$q" = "$t" ] && q=""
      if [ -n "$q" ]; then out="$(timeout 20 svc_send "$to" "$q" 2>&1)"; else out="$(timeout 20 svc_send "$to" 2>&1)"; fi
      echo "NATM-GUEST refuse $i rc=$?: $(echo "$out" | grep -v '^sending' | tr '\n' ' ')"
      i=$((i + 1))
    done
    timeout 60 svc_recv &
    r=$!
    # svc_recv must have told atmsigd it listens before natm calls: slow under TCG
    # on a loaded host.
    sleep 2
    echo "NATM-GUEST recv listening"
    wait $r
    echo "NATM-GUEST recv rc=$?"
    # The host starts its listener when it sees the line above.
    sleep "${natm_gap:-3}"
    timeout 60 svc_send "$natm_to" "${natm_qos:-ubr,aal5:max_sdu=100}"
    echo "NATM-GUEST send rc=$?"
    ;;
  kill)
    # natm calls svc_recv and keeps sending; atmsigd is killed under the call:
    # natm must release its side.
    svc_recv &
    sleep 0.5
    echo "NATM-GUEST recv listening"
    sleep "${natm_hold:-3}"
    kill -9 $sigd
    echo "NATM-GUEST sigd killed"
    sleep 5
    ;;
esac
sleep 0.3
echo "NATM-GUEST sigd-log begin"
cat /tmp/sigd.log
echo "NATM-GUEST sigd-log end"
if [ -n "${natm_ilmi:-}" ]; then
  echo "NATM-GUEST ilmid-log begin"
  tail -n 60 /tmp/ilmid.log
  echo "NATM-GUEST ilmid-log end"
fi
sleep "${natm_linger:-0}"
