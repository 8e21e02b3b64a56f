#!/usr/bin/env bash
# The main job in one command: set up, build, wrap a short demo workload with `wattscope run`, store it in SQLite
# (demo/wattscope.db) and CSV (demo/csv/), write its HTML report (demo/report.html) and print the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
mkdir -p demo
cd demo
ws=../build/wattscope
# Demo workload: two busy CPU loops for three seconds, then a second of rest.
"$ws" run --task demo-busy-loop --interval 250ms --db wattscope.db --csv csv --report report.html -- \
  sh -c 'for i in 1 2; do timeout 3 sh -c "while :; do :; done" & done; wait; sleep 1'
echo
"$ws" list --db wattscope.db
echo
echo "The latest run as JSON (wattscope show --json):"
"$ws" show --db wattscope.db --json
