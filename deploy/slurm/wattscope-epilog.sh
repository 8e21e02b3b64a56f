#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/wattscope-epilog.sh): slurmd runs it as root on every node after the job
# ends there, however it ended (done, failed, cancelled, out of time). It stops the job's recorder with SIGTERM and
# waits (WATTSCOPE_SLURM_STOP_TIMEOUT, default 30s) for it to finalise the run. Never fails: a failing epilog would
# drain the node. Problems go to syslog (tag wattscope-slurm) and stderr, as the prolog's. docs/slurm.md.
bin=${WATTSCOPE_BIN:-/usr/local/bin/wattscope}
say() {
  while IFS= read -r line; do
    printf '%s\n' "$line" >&2
    if [ "${WATTSCOPE_SLURM_SYSLOG:-1}" != 0 ] && command -v logger >/dev/null 2>&1; then
      logger -t wattscope-slurm -p daemon.warning -- "$line" 2>/dev/null
    fi
  done
}
if [ ! -x "$bin" ]; then
  echo "epilog: $bin is missing or not executable: job ${SLURM_JOB_ID:-?} is not stopped (set WATTSCOPE_BIN)" | say
  exit 0
fi
"$bin" slurm epilog </dev/null 2>&1 >/dev/null | say
exit 0
