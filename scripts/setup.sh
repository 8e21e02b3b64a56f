#!/usr/bin/env bash
# Installs every Debian package wattscope needs to build, test and benchmark. Idempotent: packages already
# installed are not fetched again. Works as root or through sudo on Debian 12 (bookworm).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libsqlite3-dev sqlite3
  libmariadb-dev mariadb-server mariadb-client
  libgtest-dev libgmock-dev libbenchmark-dev
  time procps
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
