#!/usr/bin/env bash
# ttcp over kernel TCP (examples/c/ttcp.c) beside the same program ported to libnatm
# (examples/c/ttcp_natm.c, through a sigd on this host), on loopback, alternating runs.
# Prints each run's receiver KB/s and the medians. Usage: scripts/capi-ttcp.sh [RUNS] [NBUF] [BUFLEN]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
nbuf=${2:-16384}
buflen=${3:-8192}
# Needs target/release/natm and libnatm.so: cargo build --release -p natm-cli -p natm-capi
[ -x target/release/natm ] && [ -f target/release/libnatm.so ] || { echo "build first: cargo build --release -p natm-cli -p natm-capi" >&2; exit 1; }
dir=$(mktemp -d /tmp/natm-capi-ttcp.XXXXXX)
lib=$PWD/target/release
gcc -std=c99 -O2 -o "$dir/ttcp" examples/c/ttcp.c
gcc -std=c99 -O2 -I crates/natm-capi/include -o "$dir/ttcp_natm" examples/c/ttcp_natm.c \
  -L "$lib" -lnatm -Wl,-rpath,"$lib"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sport=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'socket = "%s/sigd.sock"\nsignalling = "127.0.0.1:%s"\naddresses = ["+4420001"]\n' "$dir" "$sport" >"$dir/sigd.toml"
"$lib/natm" sigd --config "$dir/sigd.toml" 2>"$dir/sigd.log" &
sigd=$!
trap 'kill $sigd 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/sigd.sock" ] && break; sleep 0.05; done
export NATM_SIGD=$dir/sigd.sock
rate() { sed -n 's/.* = \([0-9.]*\) KB\/sec.*/\1/p' "$1"; }
tcp=() natm=()
for i in $(seq "$runs"); do
  "$dir/ttcp" -r -s -l "$buflen" -p "$port" 2>"$dir/r.txt" &
  r=$!
  for _ in $(seq 100); do "$dir/ttcp" -t -s -l "$buflen" -n "$nbuf" -p "$port" 127.0.0.1 2>/dev/null && break; sleep 0.05; done
  wait $r || echo "run $i: a receiver failed: $(cat "$dir/r.txt")" >&2
  tcp+=("$(rate "$dir/r.txt")")
  "$dir/ttcp_natm" -r -s -l "$buflen" -p "ttcp$i" 2>"$dir/r.txt" &
  r=$!
  for _ in $(seq 100); do "$dir/ttcp_natm" -t -s -l "$buflen" -n "$nbuf" -p "ttcp$i" +4420001 2>/dev/null && break; sleep 0.05; done
  wait $r || echo "run $i: a receiver failed: $(cat "$dir/r.txt")" >&2
  natm+=("$(rate "$dir/r.txt")")
  echo "run $i: tcp ${tcp[-1]} KB/s, natm ${natm[-1]} KB/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "median: tcp $(median "${tcp[@]}") KB/s, natm $(median "${natm[@]}") KB/s ($runs runs, $nbuf x $buflen bytes)"
uptime
