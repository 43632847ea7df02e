#!/usr/bin/env bash
# The one command that runs every natm test on a fresh machine (README.md).
# It installs what the tests need, then runs the unit, property, integration and
# simulator tests, and checks that the fuzz targets compile (on stable; running
# them needs `cargo +nightly fuzz`, see fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
# System packages used by tests; each is installed only when missing. tshark lets
# tests/capture_tshark.rs check that Wireshark dissects natm's captures (the test
# skips without it). nftables, iproute2 and ethtool let crates/natm-lab/tests/perf_cli.rs
# run `natm-lab perf loss` between network namespaces (it skips without them or root);
# iputils-ping, iperf3 and curl let tests/ip_cli.rs run `natm ip` between two
# namespaces (ping, an iperf3 run, an HTTP download; it skips without them).
# tests/linuxatm_clip.rs needs ip and ping as well (iproute2, iputils-ping).
# scripts/package-test.sh builds the Debian package (dpkg-dev: dpkg-shlibdeps for its
# dependencies) and checks its units (systemd: systemd-analyze, systemd-sysusers; with
# CI=true it boots them under systemd in a container: systemd-container, debootstrap)
# and man pages (man-db); it skips those checks without them.
# NATM_TEST_PKGS=" " installs nothing. tests/linuxatm.rs, linuxatm_svc.rs and
# linuxatm_clip.rs install what their QEMU guest needs themselves
# (scripts/linuxatm/prepare.sh, cached under target/linuxatm).
for p in ${NATM_TEST_PKGS:-tshark nftables iproute2 ethtool iputils-ping iperf3 curl dpkg-dev systemd systemd-container debootstrap man-db}; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    # wireshark-common asks whether non-root users may capture; answer no up front
    # so the install never waits for a terminal.
    if command -v debconf-set-selections >/dev/null; then
      echo "wireshark-common wireshark-common/install-setuid boolean false" |
        debconf-set-selections
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" </dev/null
  elif [ -z "${NATM_TEST_PKGS:-}" ]; then
    echo "note: ${need_pkgs[*]} not installed (not root); tests that need them skip" >&2
  else
    echo "tests need: ${need_pkgs[*]} (run as root, or install them)" >&2
    exit 1
  fi
fi

command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup" >&2; exit 1; }

# Each phase's wall time, printed as it ends, so the budget can be spent where it goes.
t0=$SECONDS
phase() { echo "test.sh: $1 done at $(((SECONDS - t0) / 60))m$(((SECONDS - t0) % 60))s" >&2; }

# The `ci` profile: release code (the simulator and property tests push megabytes
# through the stack) with debug assertions, so the engine's lock hierarchy
# (crates/natm/src/sync.rs) is checked in every test and every process they start.
# `cargo build --all-targets` builds what `cargo test` runs with the same features,
# and the C library's libnatm.so and libnatm.a as well (tests/capi.rs links C
# programs to them; a test build alone does not make them, and the test then built
# them with the library's own features, a second build of the stack).
cargo build --profile ci --workspace --all-targets --all-features
phase "build of the tests (ci profile)"

# The tests spend most of their time waiting (on sockets, daemons, a QEMU
# guest), so the work that only compiles runs beside them, in other build directories
# (target/debug, fuzz/target, target/release, cargo-deb's own), its output shown
# after: the Linux guest's preparation, clippy with every feature, the fuzz
# targets' check, the Debian package's build (its checks run after the tests, on
# the package built here).
# Nothing beside them sends a packet: tests that watch the host's loopback traffic
# (AF_PACKET sniffers, capture, drop counters) must see only their own.
side_log=$(mktemp)
(
  set -euo pipefail
  # The Linux guest first (downloads, two kernel modules, an initramfs: ~30 s cold),
  # done before the guest tests need it; they take the same lock and find it ready.
  start=$SECONDS
  if ! bash scripts/linuxatm/prepare.sh 2>&1 | tail -1; then
    echo "the Linux guest could not be prepared here: its tests say why"
  fi
  echo "beside the tests: the Linux guest prepared in $((SECONDS - start)) s"
  # .ci/run's clippy (the same command) then finds its work done.
  cargo clippy --workspace --all-targets --all-features -- -D warnings
  # The fuzz targets compile (type-checked: running them needs nightly's cargo fuzz,
  # which builds them itself).
  if [ -f fuzz/Cargo.toml ]; then
    cargo check --manifest-path fuzz/Cargo.toml
  fi
  start=$SECONDS
  bash scripts/package.sh
  echo "beside the tests: the package built in $((SECONDS - start)) s"
) >"$side_log" 2>&1 &
side=$!
trap 'kill "$side" 2>/dev/null || true; rm -f "$side_log"' EXIT

main_rc=0
cargo test --profile ci --workspace --all-targets --all-features || main_rc=$?
phase "tests"
side_rc=0
wait "$side" || side_rc=$?
phase "the work beside them"
echo "---- beside the tests: the guest, clippy, the fuzz check, the package's build ----"
cat "$side_log"
if [ "$main_rc" != 0 ] || [ "$side_rc" != 0 ]; then
  echo "test.sh: tests exit $main_rc, the work beside them exit $side_rc" >&2
  exit 1
fi

cargo test --profile ci --workspace --all-features --doc
phase "doc tests"
# The Debian package operators install: built, its contents checked, the binary in it
# run; with CI=true also installed with dpkg, run from /usr/bin and removed
# (docs/decisions/0032-debian-package.md).
bash scripts/package-test.sh
phase "package"
