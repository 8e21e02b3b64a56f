#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/wattscope-epilog.sh): slurmd runs it as root on every node after the job
# ends there, however it ended (done, failed, cancelled, out of time). It stops the job's recorder with SIGTERM and
# waits (WATTSCOPE_SLURM_STOP_TIMEOUT, default 30s) for it to finalise the run. Never fails: a failing epilog would
# drain the node. docs/slurm.md.
"${WATTSCOPE_BIN:-/usr/local/bin/wattscope}" slurm epilog </dev/null >/dev/null 2>&1
exit 0
