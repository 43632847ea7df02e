#!/bin/bash
# Issue 17, adaptive TPDU size: goodput and CPU per byte of natm packet-pair with TPDUs
# fixed at 4 KiB, fixed at 32 KiB, and tpdu=auto, beside TCP-BBR, through `natm-lab perf
# loss`'s 100 Mbit/s namespace link at 0, 1 and 5 % loss, for both loss units (whole
# datagrams after reassembly; link packets, i.e. IP fragments, before it).
# One invocation per (stack, loss), interleaved, the stack order rotated each round;
# CPU is the invocation's user+sys time from /usr/bin/time (both peers included, and
# the namespace set-up, the same for every stack). Needs root.
# Usage: scripts/tpdu-size-loss.sh OUTDIR [ROUNDS]
set -u
N=${NATM_LAB:-target/release/natm-lab}
out=${1:?output directory}
rounds=${2:-3}
mkdir -p "$out"
uptime > "$out/uptime_start.txt"
stacks=(natm-pp-4k natm-pp-32k natm-pp-auto tcp-bbr)
for unit in packet datagram; do
  for round in $(seq 1 "$rounds"); do
    for loss in 0 1 5; do
      for i in 0 1 2 3; do
        s=${stacks[$(( (i + round) % 4 ))]}
        tag=${unit}_${loss}_${s}_${round}
        /usr/bin/time -f "%U %S %e" -o "$out/cpu_$tag.txt" timeout 60 "$N" perf loss \
          --stacks "$s" --losses "$loss" --runs 1 --loss-unit "$unit" \
          --save "$out/res_$tag.json" > "$out/out_$tag.txt" 2>&1
        uptime >> "$out/uptime_during.txt"
      done
    done
  done
done
