#!/usr/bin/env bash
# Refreshes the pictures in docs/ that the README shows, by running the browser test that takes them
# (tests/browser/simulate.test.mjs) with its output set to docs/: the pictures are of simulated runs (--simulate),
# taken by the test suite itself, so they never drift from the product. Usage: scripts/gallery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
scripts/build.sh release wattscope
echo "gallery: recording a simulated run and serve --simulate (about 30 s), then photographing them into docs/"
WATTSCOPE_BINARY="$PWD/build/wattscope" WATTSCOPE_GALLERY_DIR="$PWD/docs" NODE_PATH="$PWD/node_modules" \
  node --test tests/browser/simulate.test.mjs
ls -l docs/report-simulated.png docs/dashboard-simulated.png docs/top-simulated.png
