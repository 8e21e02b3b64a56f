#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/wattscope-prolog.sh): slurmd runs it as root on every node before the
# job's first step there. It starts a detached `wattscope record` for the job and returns at once; it never fails the
# job (a failing prolog would drain the node), whatever wattscope's trouble: that goes to its log. docs/slurm.md.
# WATTSCOPE_BIN: where wattscope is (default /usr/local/bin/wattscope). The configuration is /etc/wattscope/slurm.conf,
# or the file WATTSCOPE_SLURM_CONFIG names.
"${WATTSCOPE_BIN:-/usr/local/bin/wattscope}" slurm prolog </dev/null >/dev/null 2>&1
exit 0
