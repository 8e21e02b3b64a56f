#!/usr/bin/env bash
# Asks apt, without changing anything (apt-get -s), what installing PACKAGE... would do, and fails when it would
# remove or downgrade a package that is installed now. Usage: scripts/apt-check.sh PACKAGE...
# Prints one line per package it would remove or downgrade; exit 0 when none, 1 when some, 2 when apt itself failed
# (a package it cannot find: run apt-get update).
set -uo pipefail
(($#)) || { echo "usage: $0 PACKAGE..." >&2; exit 2; }
# Debug::NoLocking: a simulation reads the package state only, so it neither waits for nor blocks another apt.
if ! out=$(LC_ALL=C apt-get -s -o Debug::NoLocking=1 install --no-install-recommends "$@" 2>&1); then
  echo "apt-check: apt-get could not plan installing these packages:" >&2
  grep -E '^(E|W):' <<<"$out" | head -20 >&2
  exit 2
fi
bad=0
# "Remv NAME [VERSION]": apt would remove an installed package to satisfy a conflict.
while read -r _ name version _; do
  echo "would remove: $name ${version//[\[\]]/}"
  bad=1
done < <(grep -E '^Remv ' <<<"$out")
# "Inst NAME [OLD] (NEW ...)": an installed package replaced; a NEW below OLD is a downgrade.
while read -r name old new; do
  if dpkg --compare-versions "$new" lt "$old"; then
    echo "would downgrade: $name $old -> $new"
    bad=1
  fi
done < <(sed -nE 's/^Inst ([^ ]+) \[([^]]+)\] \(([^ ]+) .*/\1 \2 \3/p' <<<"$out")
exit $bad
