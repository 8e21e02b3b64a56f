#!/usr/bin/env bash
# The whole product in one command, on any machine (a GPU is not needed): set up, build the wattscope binary only
# (not the tests or benchmarks; unoptimised, in build-demo/, which builds in about half the time), then record two
# runs into demo/wattscope.db (and CSV in demo/csv/):
#   1. a real run: a short CPU workload, measured (demo/report.html);
#   2. a simulated run: 4 GPUs of a training job from wattscope's built-in scenario (--simulate), labelled
#      "simulated" everywhere (demo/report-simulated.html).
# Then it says how to open both reports, the live dashboard and the terminal view.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "Installing what is needed (scripts/setup.sh; nothing is fetched when it is already there)"
scripts/setup.sh

say "Building the wattscope binary only, unoptimised for a quick start (build-demo/; no tests or benchmarks)"
start=$(date +%s)
scripts/build.sh demo wattscope
echo "built build-demo/wattscope in $(($(date +%s) - start)) s"
# The binary is what the demo needs; the objects it was linked from (and the precompiled header) are about 200 MB of
# a first look's disk. A later `scripts/build.sh demo` builds them again (a minute); WATTSCOPE_DEMO_KEEP_OBJECTS=1
# keeps them.
if [ "${WATTSCOPE_DEMO_KEEP_OBJECTS:-0}" != 1 ]; then
  find build-demo -type f \( -name '*.o' -o -name '*.a' -o -name '*.gch' -o -name '*.pch' \) -delete
fi

mkdir -p demo
cd demo
ws=../build-demo/wattscope

say "Run 1 of 2, measured: two busy CPU loops for three seconds, then a second of rest"
"$ws" run --task demo-busy-loop --interval 250ms --db wattscope.db --csv csv --report report.html -- \
  sh -c 'for i in 1 2; do timeout 3 sh -c "while :; do :; done" & done; wait; sleep 1'
echo
echo "The measured run as JSON (wattscope show --json):"
"$ws" show --db wattscope.db --json

say "Run 2 of 2, SIMULATED: 20 s of a training job on 4 simulated GPUs (wattscope run --simulate)"
echo "(warm-up, epochs, an evaluation, a power-capped GPU, a data-loader stall, an idle GPU; the CPU is measured)"
"$ws" run --simulate --task demo-simulated-training --db wattscope.db --csv csv --report report-simulated.html -- \
  sleep 19.5

say "Both runs in the store (wattscope list)"
"$ws" list --db wattscope.db

here=$(pwd)
say "Where to look next"
cat <<EOF
  Reports (one HTML file each, open in a browser):
    measured run:   file://$here/report.html
    simulated run:  file://$here/report-simulated.html
  Live dashboard of simulated GPUs (then open http://127.0.0.1:9400/; Ctrl-C stops it):
    build-demo/wattscope serve --simulate
  The terminal view:
    build-demo/wattscope top --simulate
  On a machine with NVIDIA GPUs, leave out --simulate to see them measured. 'build-demo/wattscope doctor' says what
  this machine can measure.
  build-demo/wattscope is unoptimised (it costs more CPU per sample): for measuring your own jobs, build the
  optimised binary with 'scripts/build.sh release wattscope' (build/wattscope, about four minutes on 2 cores).
EOF
