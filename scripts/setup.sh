#!/usr/bin/env bash
# Installs everything wattscope needs to build, test and benchmark on Debian 12 (bookworm): Debian packages through
# apt-get, then the npm packages pinned in package-lock.json (plotly.js, embedded into the binary; playwright-core,
# which drives Chromium in the browser tests). Idempotent: what is already there is not fetched again.
# Works as root or through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libsqlite3-dev sqlite3
  libmariadb-dev mariadb-server mariadb-client
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost1.81-dev zlib1g-dev prometheus wrk curl
  time procps chromium python3 python3-psutil
  python3-pytest python3-venv # issue 15: the Python marker helper's tests (pytest; pip install into a venv)
  clang libclang-rt-14-dev libfuzzer-14-dev llvm
  libncurses-dev libcurl4-openssl-dev python3-pyte # issue 16: top: ncursesw, libcurl (--connect), a VT emulator for its tests
  # issue 14: alert rules (toml++), notifiers (libcurl), and the real endpoints the alert tests deliver to
  libtomlplusplus-dev python3-aiosmtpd prometheus-alertmanager openssl
  # issue 18: the Kubernetes manifests' tests (YAML), the runtime image (built with buildah; busybox for its init step)
  python3-yaml buildah busybox-static
  slurm-wlm munge # issue 18: the Slurm prolog/epilog tests start a private single-node Slurm
  # issue 34: the Python reader's DataFrames, its MySQL path, a real PyTorch run, the plot in docs/python.md, the .deb
  python3-pandas python3-pymysql python3-torch python3-matplotlib lintian
  prometheus-pushgateway # issue 32: /metrics pushed to a real Pushgateway, which parses bodies strictly
  libeigen3-dev # issue 36: the LSTM forecaster's matrix arithmetic (header-only)
)
# A node and npm already on the PATH (the image's, nvm's) will do; otherwise Debian's.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "setup: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm ci only when package-lock.json changed since the last install.
stamp=node_modules/.wattscope-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
fi
echo "setup: ready"
