#!/usr/bin/env bash
# Interleave two natm-lab binaries (A B A B …) on the latency and throughput experiments
# and keep every JSON document, for before/after comparisons of a change.
# (`cargo build --release -p natm-lab` in each tree; the lab links the natm it measures).
# usage: scripts/ab-binaries.sh OLD_NATM_LAB NEW_NATM_LAB OUT_DIR [ROUNDS]
set -euo pipefail
old=$1 new=$2 out=$3 rounds=${4:-3}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for v in before after; do
    bin=$old; [ "$v" = after ] && bin=$new
    echo "round $r $v load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/log"
    "$bin" perf latency --stacks natm-be,natm-reliable,udp --runs 3 --time 2s --json >"$out/lat-$v-$r.json"
    "$bin" perf throughput --stacks natm-reliable,tcp-cubic --sizes 64KiB,1MiB --runs 3 --time 2s \
      --json >"$out/thr-$v-$r.json"
  done
done
