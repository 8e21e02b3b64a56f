#!/usr/bin/env bash
# Records real training runs on a lent GPU for the forecasting/anomaly work (issue 36) and keeps their stored runs:
#
#   bench/real_traces.sh BIN_DIR OUT_DIR [SECONDS]       (default 90 s for lm, half that for leak and cnn)
#
# Each of bench/real_train.py's loads (lm, leak, cnn) runs under `wattscope run --interval 100ms` into OUT_DIR/KIND.db;
# bench/traces_from_db.py turns them into tests/fixtures/traces/*.csv (one row per GPU sample, with its phase).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "$1" && pwd); out=$2; secs=${3:-90}
mkdir -p "$out"
py=${PYTHON:-python3}
for kind in lm leak cnn; do
  s=$secs; [ "$kind" = lm ] || s=$((secs / 2))
  printf '\n=== %s (%s s, %s)\n' "$kind" "$s" "$(date +%T)"
  PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} timeout $((s + 60)) "$bin/wattscope" run --task "real-$kind" \
    --interval 100ms --db "$out/$kind.db" -- "$py" bench/real_train.py "$kind" "$s" 2>&1 | tail -25
done
