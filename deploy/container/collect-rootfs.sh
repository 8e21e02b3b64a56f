#!/usr/bin/env bash
# Collects a runtime root filesystem for the wattscope image (issue 18): the binary, exactly the shared libraries it
# loads (ldd, recursively: ldd lists the whole closure), the dynamic loader, CA certificates for libcurl's HTTPS
# (webhooks, an https kubelet URL), a static busybox for the DaemonSet's RAPL init step, and a passwd/group naming
# uid/gid 9400. No compiler, no package manager, no shell besides busybox's.
# Usage: deploy/container/collect-rootfs.sh BINARY OUTDIR    (OUTDIR must not exist, or be empty)
set -euo pipefail
bin=${1:?usage: collect-rootfs.sh BINARY OUTDIR}
out=${2:?usage: collect-rootfs.sh BINARY OUTDIR}
[ -x "$bin" ] || { echo "collect-rootfs: $bin is not an executable" >&2; exit 2; }
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
  echo "collect-rootfs: $out is not empty; give a new directory" >&2
  exit 2
fi
mkdir -p "$out"/usr/local/bin "$out"/etc/ssl/certs "$out"/tmp "$out"/bin
# Without its debug information (127 MB of a RelWithDebInfo build's 137): keep the unstripped binary for gdb.
strip --strip-debug -o "$out"/usr/local/bin/wattscope "$bin"
chmod 0755 "$out"/usr/local/bin/wattscope

# Every library ldd resolves, at its own path (the loader looks in the multiarch directories without an ld.so.cache).
missing=$(ldd "$bin" | awk '/not found/ {print $1}')
if [ -n "$missing" ]; then
  echo "collect-rootfs: $bin needs libraries this machine lacks: $missing" >&2
  exit 1
fi
ldd "$bin" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u | while read -r lib; do
  mkdir -p "$out$(dirname "$lib")"
  cp -L "$lib" "$out$lib"
  # The loader is also reached through /lib64 (the binary's PT_INTERP); keep the path the binary names.
done
interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
if [ -n "$interp" ] && [ ! -e "$out$interp" ]; then
  mkdir -p "$out$(dirname "$interp")"
  cp -L "$interp" "$out$interp"
fi
# libcurl's NSS-free name lookups still read these.
printf 'hosts: files dns\n' > "$out"/etc/nsswitch.conf
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp -L /etc/ssl/certs/ca-certificates.crt "$out"/etc/ssl/certs/
if [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; then
  cp -L /bin/busybox "$out"/bin/busybox # static: needs nothing else
else
  echo "collect-rootfs: no static /bin/busybox (Debian: busybox-static); the image has no init-step shell" >&2
fi
printf 'root:x:0:0:root:/:/bin/false\nwattscope:x:9400:9400:wattscope:/:/bin/false\n' > "$out"/etc/passwd
printf 'root:x:0:\nwattscope:x:9400:\n' > "$out"/etc/group
chmod 1777 "$out"/tmp
echo "collect-rootfs: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1) in $out"
