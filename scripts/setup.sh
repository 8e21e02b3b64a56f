#!/usr/bin/env bash
# Installs what wattscope needs on Debian 12 (bookworm), as root or through sudo. Idempotent: what is already there
# is not fetched again.
#   scripts/setup.sh           what building and the demo need (scripts/packages/build.txt) and plotly.js from npm
#   scripts/setup.sh --tests   that, plus what the tests, fuzzing and benchmarks need (scripts/packages/test.txt)
#                              and the browser tests' driver (playwright-core, an npm devDependency)
# A guest on the user's machine: it never removes or downgrades an installed package. apt is asked first
# (scripts/apt-check.sh); where it would remove or downgrade something, setup stops, names it and changes nothing,
# and the install itself runs with --no-remove. The test stack is installed with services held back (policy-rc.d):
# the tests start their own private servers, so MariaDB, Prometheus, Slurm and the rest are left stopped and, where
# systemd runs, not enabled at boot for the packages this script installed.
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: unknown option '$1' (use --tests for the test stack, or nothing for the build and demo)" >&2; exit 2 ;;
esac

read_list() { sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$1"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

packages=($(read_list scripts/packages/build.txt))
((tests)) && packages+=($(read_list scripts/packages/test.txt))
# A node and npm already on the PATH (the image's, nvm's) will do; otherwise Debian's.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if [ "$p" = libboost-dev ]; then
    # Any Boost 1.74 or later already installed serves (Asio and Beast are header-only); asking for Debian's default
    # beside another version would make apt remove the other one.
    have=$(dpkg-query -W -f='${Package} ${Status}\n' 'libboost1.*-dev' 2>/dev/null |
           sed -nE 's/^libboost(1\.[0-9]+)-dev install ok installed$/\1/p' | sort -V | tail -n 1 || true)
    if [ -n "$have" ] && dpkg --compare-versions "$have" ge 1.74; then continue; fi
  fi
  installed "$p" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "setup: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  if ! verdict=$(scripts/apt-check.sh "${missing[@]}"); then
    {
      echo "setup: stopped before installing anything: apt would change packages you have."
      [ -n "$verdict" ] && sed 's/^/  /' <<<"$verdict"
      echo "  wattscope never removes or downgrades a package. Install the packages above by hand once the conflict is"
      echo "  settled (apt-get install --no-remove ${missing[*]}), or build on a machine or container of its own."
    } >&2
    exit 1
  fi
  # Services held back while installing: invoke-rc.d asks policy-rc.d, and 101 means "not now". Only a policy-rc.d
  # this script made is removed again (also one an earlier, killed run left: it says so in its second line); one the
  # machine had is left alone (and already governs services).
  policy=/usr/sbin/policy-rc.d
  mark="# written by wattscope scripts/setup.sh while it installs; removed when it ends"
  made_policy=0
  if [ ! -e "$policy" ] || [ "$(sed -n 2p "$policy" 2>/dev/null)" = "$mark" ]; then
    printf '#!/bin/sh\n%s\nexit 101\n' "$mark" | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made_policy=1
    trap '"${sudo[@]}" rm -f "$policy"' EXIT
    trap 'exit 130' INT TERM HUP # through the EXIT trap: never leave the machine's services held back
  fi
  installed_now() { dpkg-query -W -f='${Package} ${Status}\n' 2>/dev/null | sed -n 's/ install ok installed$//p' | sort; }
  before=$(installed_now)
  # The .deb files fetched here are deleted once installed (what the machine's apt cache held before stays).
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-remove --no-install-recommends \
    -o APT::Keep-Downloaded-Packages=false "${missing[@]}"
  if ((made_policy)); then "${sudo[@]}" rm -f "$policy"; trap - EXIT INT TERM HUP; fi
  # Not started now, and not at the next boot either: the units of every package installed here, the ones pulled in
  # as dependencies too (slurm-wlm brings slurmd and slurmctld), are disabled where systemd runs. Units of packages
  # the machine had before are not touched.
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    units=()
    for p in $(comm -13 <(echo "$before") <(installed_now)); do
      while read -r f; do units+=("$(basename "$f")"); done < <(dpkg -L "$p" 2>/dev/null |
        grep -E '^(/usr)?/lib/systemd/system/[^/@]+\.(service|socket|timer)$' || true)
    done
    if ((${#units[@]})); then
      echo "setup: not starting at boot (the tests start their own): ${units[*]}"
      "${sudo[@]}" systemctl disable --quiet "${units[@]}" 2>/dev/null || true
    fi
  fi
fi

# npm ci only when package-lock.json changed since the last install (or the test stack's driver is wanted now).
stamp=node_modules/.wattscope-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if ((tests)); then want+="+dev"; fi
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" != "$want" ] && ! { ((! tests)) && [ "$have" = "$want+dev" ]; }; then
  if ((tests)); then
    echo "setup: npm ci (plotly.js, and playwright-core for the browser tests)"
    npm ci --no-audit --no-fund --loglevel=error
  else
    echo "setup: npm ci --omit=dev (plotly.js)"
    npm ci --omit=dev --no-audit --no-fund --loglevel=error
  fi
  echo "$want" > "$stamp"
fi
echo "setup: ready"
