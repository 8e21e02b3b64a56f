#!/usr/bin/env bash
# Builds the Debian package of wattscope with CPack: the binary, the Python helper and reader, the systemd unit and
# its system user (sysusers.d), the deployment files under /usr/share/wattscope/, a man page and bash completion
# generated from the command table (scripts/gen_cli_docs.py). Usage:
#
#   scripts/package.sh [OUTDIR]        # default OUTDIR: build/package; prints the .deb's path
#
# It builds the release binary first (scripts/build.sh release wattscope) unless WATTSCOPE_PACKAGE_NO_BUILD=1 (the
# tests, which have it built), and uses WATTSCOPE_BUILD_DIR (default build/). Then, for example:
#   sudo apt install ./build/package/wattscope_0.1.0_amd64.deb && sudo systemd-sysusers
#   sudo systemctl enable --now wattscope
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${WATTSCOPE_BUILD_DIR:-$root/build}
out=${1:-$build/package}
if [ "${WATTSCOPE_PACKAGE_NO_BUILD:-0}" != 1 ]; then
  "$root/scripts/build.sh" release wattscope >&2
fi
[ -f "$build/CPackConfig.cmake" ] || { echo "package: $build is not a configured build (run scripts/build.sh)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Generated files (man page, completion, unit) go beside the package, not into the build tree.
export WATTSCOPE_GEN_DIR="$out/generated"
( cd "$out" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$out" >"$out/cpack.log" 2>&1 ) || {
  tail -40 "$out/cpack.log" >&2; exit 1; }
rm -rf "$out/_CPack_Packages"
ls "$out"/wattscope_*.deb
