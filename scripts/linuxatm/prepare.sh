#!/usr/bin/env bash
# Prepares everything a Linux-ATM guest needs, once: Debian's kernel with its ATM
# modules, atm-tools, atmtcp.ko and atm.ko rebuilt with small patches (see
# atmtcp-allow-ctrl.patch, atm-sigd-trust-vcc.patch and docs/switch.md
# "The Linux guest harness"), and a
# busybox initramfs. Everything is cached under $NATM_LINUXATM_DIR (default
# target/linuxatm); a second run only checks the stamps and returns.
#
# Exit status: 0 ready; 3 this machine cannot prepare the guest (no root to install
# packages, packages not available, no qemu) -- callers may skip on 3; anything else
# is a failure of the recipe itself.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
OUT="${NATM_LINUXATM_DIR:-$repo/target/linuxatm}"
# The kernel this was checked with. When Debian's mirror no longer has it (its ABI
# moves on with security updates), the one linux-image-amd64 depends on now is used;
# the patch's context is one function of atmtcp.c, stable across 6.1.y.
KV="${NATM_LINUXATM_KV:-6.1.0-56-amd64}"
if [ -z "${NATM_LINUXATM_KV:-}" ] && ! ls "$OUT"/ready-"$KV"-* >/dev/null 2>&1 &&
  ! apt-cache show "linux-image-$KV" >/dev/null 2>&1; then
  now="$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -1)"
  [ -n "$now" ] && KV="$now"
fi
mkdir -p "$OUT"
cd "$OUT"
log() { echo "[linuxatm prepare] $*" >&2; }
# One preparation at a time: the tests of one binary run in parallel and each calls
# this; on a cold cache two runs would download and build into the same files (seen:
# one's `make` found the other's half-copied atm module sources). The others wait
# here, then find the stamp.
exec 9>"$OUT/.prepare.lock"
flock 9
cannot() { log "cannot prepare: $*"; exit 3; }

# The inputs of the cached artefacts: when any changes, the initramfs is rebuilt.
inputs_hash() {
  cat "$here/prepare.sh" "$here/init" "$here/atmtcp-allow-ctrl.patch" \
    "$here/atm-sigd-trust-vcc.patch" | sha256sum | cut -c1-16
}
stamp="ready-$KV-$(inputs_hash)"
if [ -f "$stamp" ] && [ -f initrd-base.cpio.gz ] && [ -f vmlinuz ]; then
  exit 0
fi

# 1. Host packages: qemu to run the guest, busybox-static/cpio/kmod to build the
#    initramfs, headers and a compiler for the one rebuilt module.
need=()
for p in qemu-system-x86 busybox-static cpio kmod patch "linux-headers-$KV" gcc make; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || cannot "missing ${need[*]} and not root"
  command -v apt-get >/dev/null || cannot "missing ${need[*]} and no apt-get"
  log "installing ${need[*]}"
  apt-get update -qq || cannot "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
    </dev/null >&2 || cannot "cannot install ${need[*]}"
fi
command -v qemu-system-x86_64 >/dev/null || cannot "no qemu-system-x86_64"

# 2. The guest's packages, downloaded (not installed): the kernel, atm-tools and its
#    libraries, and the kernel source (only drivers/atm/atmtcp.c is used).
mkdir -p debs
want=("linux-image-$KV" atm-tools libatm1 libfl2 linux-source-6.1)
missing=()
for p in "${want[@]}"; do
  ls debs/"${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "downloading ${missing[*]}"
  if ! (cd debs && apt-get download "${missing[@]}" >&2); then
    [ "$(id -u)" = 0 ] && apt-get update -qq || true
    (cd debs && apt-get download "${missing[@]}" >&2) || cannot "cannot download ${missing[*]}"
  fi
fi

# 3. Kernel and modules, atm-tools.
rm -rf kpkg atm
mkdir -p kpkg atm
dpkg -x debs/linux-image-"$KV"_*.deb kpkg
grep -q '^CONFIG_ATM_TCP=m' "kpkg/boot/config-$KV" || { log "kernel $KV has no atmtcp module"; exit 1; }
cp "kpkg/boot/vmlinuz-$KV" vmlinuz
for f in debs/atm-tools_*.deb debs/libatm1_*.deb debs/libfl2_*.deb; do dpkg -x "$f" atm; done

# 4. atmtcp.ko rebuilt with the patch: Debian's 6.1.192 carries the 2025 fix
#    "atm: atmtcp: Prevent arbitrary write in atmtcp_recv_control()", which refuses
#    every control reply of the atmtcp daemon, so no VC can be opened (the opener
#    hangs). The patch lets a complete struct atmtcp_control through again. For a
#    throw-away test guest only.
rm -rf ksrc atmtcp-mod atm-mod
mkdir -p ksrc atmtcp-mod atm-mod
dpkg-deb --fsys-tarfile debs/linux-source-6.1_*.deb |
  tar -x -C ksrc --wildcards '*/linux-source-6.1.tar.xz'
tar -xJf ksrc/usr/src/linux-source-6.1.tar.xz -C atmtcp-mod --strip-components=3 \
  linux-source-6.1/drivers/atm/atmtcp.c
tar -xJf ksrc/usr/src/linux-source-6.1.tar.xz -C atm-mod --strip-components=3 \
  --wildcards 'linux-source-6.1/net/atm/*'
rm -rf ksrc
patch -s -p1 -d atmtcp-mod <"$here/atmtcp-allow-ctrl.patch"
echo 'obj-m := atmtcp.o' >atmtcp-mod/Kbuild
make -s -C "/usr/src/linux-headers-$KV" M="$OUT/atmtcp-mod" modules >&2

# 4b. atm.ko rebuilt likewise: the same kernel carries the 2025 fix that validates the
#     vcc pointer of atmsigd's answers against vcc_hash (find_get_vcc), but a socket
#     being bound, connected or set listening is not in vcc_hash yet, so every SVC
#     operation fails ("kernel write: Invalid argument" in atmsigd) and the program
#     sleeps uninterruptibly. atm-sigd-trust-vcc.patch restores the old trust. The
#     module is built from the same source with the objects of net/atm/Makefile.
patch -s -p1 -d atm-mod <"$here/atm-sigd-trust-vcc.patch"
printf '%s\n' 'obj-m := atm.o' \
  'atm-y := addr.o pvc.o signaling.o svc.o ioctl.o common.o atm_misc.o raw.o resources.o atm_sysfs.o proc.o' \
  >atm-mod/Kbuild
rm -f atm-mod/Makefile
make -s -C "/usr/src/linux-headers-$KV" M="$OUT/atm-mod" modules >&2

# 5. The initramfs without tests (boot.sh appends the tests as a second archive).
R="$OUT/initrd-root"
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib/x86_64-linux-gnu,lib64,etc,tests,lib/modules/$KV}
cp /bin/busybox "$R/bin/busybox"
cp -a atm/usr/bin/. "$R/usr/bin/"
cp -a atm/usr/sbin/. "$R/usr/sbin/"
[ -d atm/sbin ] && cp -a atm/sbin/. "$R/sbin/"
cp -a atm/etc/atmsigd.conf "$R/etc/"
cp -L atm/usr/lib/x86_64-linux-gnu/libatm.so.1 atm/usr/lib/x86_64-linux-gnu/libfl.so.2 \
  "$R/lib/x86_64-linux-gnu/"
# atm-tools are bookworm binaries: the host's bookworm glibc runs them.
cp -L /lib/x86_64-linux-gnu/libc.so.6 "$R/lib/x86_64-linux-gnu/"
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
M="kpkg/lib/modules/$KV"
# virtio-net, not an emulated e1000: its link is up at once, where the e1000's
# carrier took 2 s of every boot and the first connection another second.
for m in kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko \
  kernel/drivers/virtio/virtio_pci.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko \
  kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/net/core/failover.ko \
  kernel/drivers/net/net_failover.ko kernel/drivers/net/virtio_net.ko \
  kernel/net/atm/clip.ko kernel/net/atm/br2684.ko; do
  mkdir -p "$R/lib/modules/$KV/$(dirname "$m")"
  cp "$M/$m" "$R/lib/modules/$KV/$m"
done
mkdir -p "$R/lib/modules/$KV/kernel/drivers/atm"
cp atmtcp-mod/atmtcp.ko "$R/lib/modules/$KV/kernel/drivers/atm/atmtcp.ko"
cp atm-mod/atm.ko "$R/lib/modules/$KV/kernel/net/atm/atm.ko"
cp "$M/modules.builtin" "$M/modules.order" "$R/lib/modules/$KV/"
/sbin/depmod -b "$R" "$KV"
echo "127.0.0.1 localhost" >"$R/etc/hosts"
echo "hosts: files" >"$R/etc/nsswitch.conf"
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
cp "$here/init" "$R/init"
chmod 755 "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) >initrd-base.cpio.gz.tmp
mv initrd-base.cpio.gz.tmp initrd-base.cpio.gz
rm -rf "$R" kpkg atm
rm -f ready-*
touch "$stamp"
log "ready in $OUT ($(du -h initrd-base.cpio.gz | cut -f1) initramfs)"
