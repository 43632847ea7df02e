#!/usr/bin/env bash
# Throughput of Linux's ATM stack (ttcp_atm in the QEMU guest, over an atmtcp port of
# `natm switch`) beside natm's own transfer over the same switch and kernel TCP
# between the same host and guest; prints a table of medians and ranges with the
# load average. Nothing is asserted about speed.
#   scripts/linuxatm/bench.sh [RUNS [MIB [RATE]]]
# RUNS rounds (default 3) of MIB MiB each way (default 16); natm's bare calls are
# paced at RATE (default 40Mbps). NATM_LINUXATM_BENCH_RMEM=OCTETS sets the guest's
# default socket receive buffer (unset: the kernel's). Prepares the guest first if
# needed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
export NATM_LINUXATM_BENCH_RUNS="${1:-3}"
export NATM_LINUXATM_BENCH_MIB="${2:-16}"
export NATM_LINUXATM_BENCH_RATE="${3:-40Mbps}"
echo "uptime: $(uptime)"
cargo test --release --test linuxatm_svc -- --nocapture --exact \
  bench_ttcp_atm_beside_natm_and_kernel_tcp 2>&1 |
  grep -v -e '^running ' -e '^test result' -e '^$' -e '^test bench'
echo "uptime: $(uptime)"
