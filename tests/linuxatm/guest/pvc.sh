# PVCs between Linux's ATM stack and natm (tests/linuxatm.rs).
# Interface 0 connects to the natm switch's listening atmtcp port, host
# 127.0.0.1:$natm_port (10.0.2.2 under slirp): aread prints what natm sends on
# 0.0.$natm_rx_vci, awrite sends $natm_payload on 0.0.$natm_tx_vci, and on
# 0.0.$natm_stray_vci if set (a VC without a PVC).
# With natm_listen=1, interface 1 listens on the guest's port 2812 (boot.sh's
# NATM_LINUXATM_FWD) for a switch port that connects: aread on 1.0.$natm_rx2_vci,
# and once the switch is connected, awrite $natm_payload2 on 1.0.$natm_tx2_vci.
# Markers: ready, awrite rc=N, stray rc=N, listening, connected2, awrite2 rc=N.
: "${natm_port:?}" "${natm_payload:?}"
rx="${natm_rx_vci:-200}"
tx="${natm_tx_vci:-100}"
atmtcp virtual connect 10.0.2.2 "$natm_port" bg >/dev/null 2>&1 ||
  { echo "NATM-GUEST fail atmtcp connect 10.0.2.2:$natm_port"; exit 1; }
if [ "${natm_listen:-0}" = 1 ]; then
  atmtcp virtual listen-bg 2812 >/dev/null 2>&1 ||
    { echo "NATM-GUEST fail atmtcp listen 2812"; exit 1; }
fi

# Waits until /proc/net/atm/vc ("Address Itf VPI VCI ...") lists ITF 0.VCI.
vc_open() {
  i=0
  until grep -Eq "^[^ ]+ +$1 +0 +$2 " /proc/net/atm/vc 2>/dev/null || [ $i -ge 50 ]; do
    sleep 0.1; i=$((i + 1))
  done
}

# aread stays on the console (a tty): line-buffered, so each frame shows at once.
aread "0.0.$rx" &
vc_open 0 "$rx"
echo "NATM-GUEST ready rx=0.0.$rx"
awrite "0.0.$tx" "$natm_payload" >/dev/null
echo "NATM-GUEST awrite rc=$?"
if [ -n "${natm_stray_vci:-}" ]; then
  awrite "0.0.$natm_stray_vci" "no PVC here" >/dev/null
  echo "NATM-GUEST stray rc=$?"
fi

if [ "${natm_listen:-0}" = 1 ]; then
  rx2="${natm_rx2_vci:-300}"
  tx2="${natm_tx2_vci:-301}"
  aread "1.0.$rx2" &
  vc_open 1 "$rx2"
  echo "NATM-GUEST listening"
  # /proc/net/tcp: local port 2812 (0AFC) in state 01, established.
  i=0
  until grep -Eq "^ *[0-9]+: [0-9A-F]+:0AFC [0-9A-F]+:[0-9A-F]+ 01 " /proc/net/tcp || [ $i -ge 600 ]; do
    sleep 0.1; i=$((i + 1))
  done
  echo "NATM-GUEST connected2"
  awrite "1.0.$tx2" "${natm_payload2:-}" >/dev/null
  echo "NATM-GUEST awrite2 rc=$?"
fi
# The host ends the run when it has seen what it needs; this bounds a lost one.
sleep "${natm_linger:-60}"
