# Boots and does nothing: the harness's own cost.
echo "NATM-GUEST noop"
