# PVCs between Linux's ATM stack and natm (tests/linuxatm.rs): the guest's atmtcp
# interface connects to the natm switch's atmtcp port on the host; aread prints
# what natm sends on 0.0.$natm_rx_vci, awrite sends $natm_payload on 0.0.$natm_tx_vci.
# Markers: "NATM-GUEST ready" once aread is open, "NATM-GUEST awrite rc=N", and
# "NATM-GUEST stray rc=N" after an awrite on 0.0.$natm_stray_vci if that is set.
: "${natm_port:?}" "${natm_payload:?}"
rx="${natm_rx_vci:-200}"
tx="${natm_tx_vci:-100}"
atmtcp virtual connect 10.0.2.2 "$natm_port" bg >/dev/null 2>&1 ||
  { echo "NATM-GUEST fail atmtcp connect 10.0.2.2:$natm_port"; exit 1; }
# aread stays on the console (a tty): line-buffered, so each frame shows at once.
aread "0.0.$rx" &
i=0
# /proc/net/atm/vc: "Address Itf VPI VCI ...": wait for itf 0, 0.$rx.
until grep -Eq "^[^ ]+ +0 +0 +$rx " /proc/net/atm/vc 2>/dev/null || [ $i -ge 50 ]; do
  sleep 0.1; i=$((i + 1))
done
echo "NATM-GUEST ready rx=0.0.$rx"
awrite "0.0.$tx" "$natm_payload" >/dev/null
echo "NATM-GUEST awrite rc=$?"
# A VC the switch has no PVC for: the switch drops and counts it.
if [ -n "${natm_stray_vci:-}" ]; then
  awrite "0.0.$natm_stray_vci" "no PVC here" >/dev/null
  echo "NATM-GUEST stray rc=$?"
fi
# The host ends the run when it has seen what it needs; this bounds a lost one.
sleep "${natm_linger:-60}"
