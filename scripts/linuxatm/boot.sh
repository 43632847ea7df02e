#!/usr/bin/env bash
# Boots the Linux-ATM guest that prepare.sh built, running one test script.
#   scripts/linuxatm/boot.sh TEST [natm_key=value ...]
# TEST is a script in $NATM_LINUXATM_TESTS (default tests/linuxatm/guest), TEST.sh;
# the key=value pairs reach it as environment variables. The serial console is this
# process's stdout; the guest powers off when the test ends (callers bound the time).
# Software emulation (TCG): this machine's nested KVM cannot boot Linux, and the
# guest needs about 3 s to reach its test. NATM_LINUXATM_ACCEL=kvm tries KVM.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
OUT="${NATM_LINUXATM_DIR:-$repo/target/linuxatm}"
TESTS="${NATM_LINUXATM_TESTS:-$repo/tests/linuxatm/guest}"
T="${1:?usage: boot.sh TEST [natm_key=value ...]}"
shift
[ -f "$OUT/initrd-base.cpio.gz" ] || { echo "run scripts/linuxatm/prepare.sh first" >&2; exit 3; }
[ -f "$TESTS/$T.sh" ] || { echo "no guest test $TESTS/$T.sh" >&2; exit 2; }
# The tests go in a second cpio archive appended to the cached one: the kernel
# unpacks concatenated archives in order, so a test needs no rebuild. Both are
# cached by the scripts' hash (written beside and renamed: runs may overlap).
h="$(cat "$OUT/initrd-base.cpio.gz" "$TESTS"/*.sh | sha256sum | cut -c1-16)"
initrd="$OUT/initrd-$h.cpio.gz"
if [ ! -f "$initrd" ]; then
  scratch="$(mktemp -d "$OUT/tests.XXXXXX")"
  mkdir -p "$scratch/root/tests"
  cp "$TESTS"/*.sh "$scratch/root/tests/"
  (cd "$scratch/root" && find . | cpio -o -H newc --quiet | gzip -1) >"$scratch/tests.cpio.gz"
  cat "$OUT/initrd-base.cpio.gz" "$scratch/tests.cpio.gz" >"$scratch/initrd.cpio.gz"
  rm -f "$OUT"/initrd-????????????????.cpio.gz
  mv "$scratch/initrd.cpio.gz" "$initrd"
  rm -rf "$scratch"
fi
for kv in "$@"; do
  case "$kv" in natm_*=*) ;; *) echo "not a natm_key=value: $kv" >&2; exit 2 ;; esac
done
# NATM_LINUXATM_FWD=P forwards the host's 127.0.0.1:P to the guest's port 2812 (for
# `atmtcp virtual listen` in the guest); loopback only.
fwd=""
if [ -n "${NATM_LINUXATM_FWD:-}" ]; then
  fwd=",hostfwd=tcp:127.0.0.1:${NATM_LINUXATM_FWD}-:2812"
fi
accel="tcg"
[ "${NATM_LINUXATM_ACCEL:-}" = kvm ] && accel="kvm"
exec qemu-system-x86_64 -accel "$accel" -smp 1 -m 256 -display none -no-reboot \
  -serial stdio -monitor none -nodefaults \
  -kernel "$OUT/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 natm_test=$T $*" \
  -netdev "user,id=n0$fwd" -device virtio-net-pci,netdev=n0 </dev/null
