#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/wattscope-prolog.sh): slurmd runs it as root on every node before the
# job's first step there. It starts a detached `wattscope record` for the job and returns at once; it never fails the
# job (a failing prolog would drain the node), whatever wattscope's trouble. docs/slurm.md.
# WATTSCOPE_BIN: where wattscope is (the installed binary by default: the package's /usr/bin/wattscope, rewritten at
# install time). The configuration is /etc/wattscope/slurm.conf, or the file WATTSCOPE_SLURM_CONFIG names.
# What goes wrong is said, not swallowed: wattscope's own complaints (also in <state dir>/slurm.log) and a missing
# binary go to syslog (logger, tag wattscope-slurm; WATTSCOPE_SLURM_SYSLOG=0 leaves syslog out) and to stderr.
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
  echo "prolog: $bin is missing or not executable: job ${SLURM_JOB_ID:-?} is not recorded (set WATTSCOPE_BIN)" | say
  exit 0
fi
"$bin" slurm prolog </dev/null 2>&1 >/dev/null | say
exit 0
