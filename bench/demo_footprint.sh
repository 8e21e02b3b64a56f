#!/usr/bin/env bash
# What scripts/demo.sh costs on a fresh machine: time and disk, in a minimal Debian 12 root (debootstrap
# --variant=minbase bookworm), against the goals "installs at most 1 GB, finishes within 3 minutes". Usage, as root on
# Debian 12 with the network (deb.debian.org and the npm registry):
#
#   bench/demo_footprint.sh [--keep] [--guest-check] [--no-demo] [--apply PATCH] [--no-host-ca] [--minbase DIR]
#                           [--mirror URL] [REPO]
#
# REPO (default: this script's checkout) is `git clone`d into the root, so only committed files take part (--apply
# PATCH: `git apply`s PATCH to that clone first, to measure a change before it is committed; the summary says so).
#   1. debootstrap a minbase root in a temporary directory (mktemp -d; debootstrap itself is installed on the host
#      with apt-get when missing: a host-side tool of this benchmark, not something the demo needs);
#   2. time scripts/demo.sh in it (chroot, as root), whole and in parts: setup's apt packages, setup's npm ci, the
#      build, the two recorded runs; with the host's load before and after, as other work on the machine slows the
#      build;
#   3. what the demo left on disk: the root's size after minus before, by part (dpkg's Installed-Size, apt's .deb
#      cache and lists, node_modules, npm's cache, build-demo/, demo/), the 10 largest packages it brought in, and
#      whether it left any process (a service) running or a service's unit installed;
#   4. a summary with PASS/FAIL against the goals.
# --guest-check also checks that setup is a guest, in two more roots from the same minbase: (a) after
# `apt-get install python3-scipy python3-numba`, scripts/setup.sh removes and downgrades nothing; (b) after
# `apt-get install libboost1.81-dev`, setup keeps Boost 1.81 (does not ask for libboost-dev) and the demo's binary
# still configures and builds against it. --no-demo skips 2-3 (for the guest checks alone). --keep keeps the
# temporary directory (the roots and the logs) for inspection; it is removed otherwise. dpkg's lines (Unpacking,
# Setting up, ...) are kept in the log, not shown. The host's local CA certificates (/usr/local/share/ca-certificates:
# a TLS-inspecting proxy's, on a network that has one) are copied into each root, so that it reaches the npm registry
# as the host does; --no-host-ca leaves them out. --minbase DIR starts from a copy of DIR, a minbase root made before
# (the minbase/ of a --keep run), instead of running debootstrap again.
# Every mount (debootstrap's, the chroot's /proc, /sys, /dev) is made inside a private mount and PID namespace
# (unshare): it is never visible on the host, and it goes, with any process left in the root, when the namespace ends.
set -eEuo pipefail
export LC_ALL=C

usage() { echo "usage: $0 [--keep] [--guest-check] [--no-demo] [--apply PATCH] [--no-host-ca] [--minbase DIR] [--mirror URL] [REPO]" >&2; exit 2; }
die() { echo "demo_footprint: $*" >&2; exit 1; }

# ---- inside the private namespaces: mount the kernel's file systems in ROOT, run a command chrooted, list leftovers
if [ "${1:-}" = __in_root ]; then
  root=$2; shift 2
  trap 'exit 130' INT TERM HUP   # PID 1 of a namespace ignores signals it has no handler for
  mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys" 2>/dev/null || mount --rbind -o ro /sys "$root/sys"
  # A /dev of its own (tmpfs) with the host's few device nodes bound in: nothing the root writes there reaches /dev.
  mount -t tmpfs -o nosuid,mode=755 tmpfs "$root/dev"
  for n in null zero full random urandom tty; do : > "$root/dev/$n"; mount --bind "/dev/$n" "$root/dev/$n"; done
  mkdir -p "$root/dev/pts" "$root/dev/shm"
  if mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts" 2>/dev/null; then
    ln -s pts/ptmx "$root/dev/ptmx"
  else
    mount --bind /dev/pts "$root/dev/pts"; : > "$root/dev/ptmx"; mount --bind /dev/ptmx "$root/dev/ptmx"
  fi
  mount -t tmpfs -o nosuid,nodev tmpfs "$root/dev/shm"
  ln -s /proc/self/fd "$root/dev/fd"
  ln -s /proc/self/fd/0 "$root/dev/stdin"; ln -s /proc/self/fd/1 "$root/dev/stdout"; ln -s /proc/self/fd/2 "$root/dev/stderr"
  echo "@@ start $EPOCHREALTIME"
  rc=0
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" </dev/null || rc=$?
  echo "@@ end $EPOCHREALTIME rc=$rc"
  # CPU time of the command (user, system), to judge its wall-clock time on a busy host. `times` runs here, not in a
  # subshell (which would count none of it); its output goes through the namespace's own /dev/shm.
  times > "$root/dev/shm/.times"
  { read -r _; read -r cu cs; } < "$root/dev/shm/.times"
  echo "@@ cpu $cu $cs"
  # This is PID 1 of the namespace: any other process here is one the command left behind (a service, say).
  for d in "$root"/proc/[0-9]*; do
    pid=${d##*/}
    [ "$pid" = 1 ] || [ "$pid" = "$BASHPID" ] && continue
    comm=$(cat "$d/comm" 2>/dev/null) || continue
    echo "@@ leftover $pid $comm $(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)"
  done
  exit "$rc"   # the namespace ends here: its mounts and any process left in it go with it
fi

# ---- options and checks
keep=0 guest=0 demo=1 host_ca=1 minbase='' mirror=http://deb.debian.org/debian repo='' patch=''
while (($#)); do
  case "$1" in
    --keep) keep=1 ;;
    --guest-check) guest=1 ;;
    --no-demo) demo=0 ;;
    --no-host-ca) host_ca=0 ;;
    --minbase) [ $# -ge 2 ] || usage; minbase=$(readlink -f "$2") && [ -x "$minbase/usr/bin/apt-get" ] ||
                 die "not a Debian root: '$2'"; shift ;;
    --mirror) [ $# -ge 2 ] || usage; mirror=$2; shift ;;
    --apply) [ $# -ge 2 ] || usage; patch=$(readlink -f "$2") && [ -f "$patch" ] || die "no patch file '$2'"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -*) echo "demo_footprint: unknown option '$1'" >&2; usage ;;
    *) [ -z "$repo" ] || usage; repo=$1 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || die "run me as root (debootstrap, chroot and mount need it)"
[ -n "${EPOCHREALTIME:-}" ] || die "needs bash 5 or later"
grep -qs '^12\.' /etc/debian_version || die "made for a Debian 12 host (/etc/debian_version: $(cat /etc/debian_version 2>/dev/null))"
for t in git unshare chroot mount findmnt dpkg-query du; do command -v "$t" >/dev/null || die "'$t' is missing"; done
self=$(readlink -f "$0")
repo=$(git -C "${repo:-$(dirname "$self")}" rev-parse --show-toplevel 2>/dev/null) ||
  die "not a git checkout: ${repo:-$(dirname "$self")}"

# ---- the temporary directory, and leaving nothing behind
work=$(mktemp -d "${TMPDIR:-/tmp}/wattscope-footprint.XXXXXX")
avail=$(df -Pk "$work" | awk 'NR==2 {print $4}')
((avail > 6 * 1024 * 1024)) || { rmdir "$work"; die "needs about 6 GB free in ${TMPDIR:-/tmp} (has $((avail / 1024)) MB)"; }
cleanup() {
  local rc=$? p r m left
  trap - EXIT INT TERM HUP
  # Processes whose root is in the work directory: only ours (the namespaces end them already); end them by their id.
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [[ "$r" == "$work"/* ]] && kill -KILL "${p##*/}" 2>/dev/null || true
  done
  # Mounts are all made in private namespaces; any that shows here anyway is unmounted, deepest first.
  for _ in 1 2 3; do
    mapfile -t left < <(findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1' | sort -r)
    ((${#left[@]})) || break
    for m in "${left[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  if findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1 {f=1} END {exit !f}'; then
    echo "demo_footprint: NOT removing $work: something is still mounted under it (findmnt | grep $work)" >&2
  elif ((keep)); then
    echo "kept: $work (roots, logs); remove it with: rm -rf --one-file-system $work"
  else
    rm -rf --one-file-system "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
trap 'echo "demo_footprint: stopped: line $LINENO: $BASH_COMMAND failed" >&2' ERR

# ---- helpers
us() { local t=${1/./}; echo "$((10#$t))"; }                 # EPOCHREALTIME -> microseconds
mmss() { local s=$((($1 + 500000) / 1000000)); printf '%d:%02d' $((s / 60)) $((s % 60)); }
mb() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1e6}'; }     # bytes -> MB (10^6)
size() { if [ -e "$1" ]; then du -sxB1 "$1" | cut -f1; else echo 0; fi; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
aptbin() { local f n=0; for f in "$1"/var/cache/apt/*.bin; do [ -f "$f" ] && n=$((n + $(stat -c %s "$f"))); done; echo "$n"; }
t0=$(us "$EPOCHREALTIME")
note() { printf '[%s] %s\n' "$(mmss $(($(us "$EPOCHREALTIME") - t0)))" "$*"; }
# Installed packages of a root: "name:arch version installed-size-KiB"
pkgs() { dpkg-query --admindir="$1/var/lib/dpkg" -W -f='${db:Status-Abbrev}|${Package}:${Architecture}|${Version}|${Installed-Size}\n' |
         awk -F'|' '$1 ~ /^ii/ {print $2, $3, ($4 == "" ? 0 : $4)}' | sort; }
kib_sum() { awk '{s += $3} END {printf "%d", s * 1024}' "$1"; }
# deb_bytes ROOT PKGS: what fetching PKGS ("name:arch version ..." lines) downloads: their .debs' sizes, from the
# root's apt lists (whether or not apt kept the .debs)
deb_bytes() {
  awk 'FNR == NR {want[$1 " " $2] = 1; next}
       function done() {if ((p ":" a " " v) in want && !seen[p ":" a " " v]++) t += s; p = a = v = s = ""}
       /^Package: / {p = $2} /^Architecture: / {a = $2} /^Version: / {v = $2} /^Size: / {s = $2} /^$/ {done()}
       END {done(); printf "%d", t}' "$2" "$1"/var/lib/apt/lists/*_Packages 2>/dev/null || echo 0
}
# in_root ROOT LOG CMD...: CMD chrooted in ROOT (private namespaces), its output shown and kept in LOG with a time
# stamp a line; returns CMD's status.
in_root() {
  local root=$1 log=$2; shift 2
  local rc
  { unshare --mount --pid --fork --propagation private -- "$self" __in_root "$root" "$@" 2>&1 && echo "@@ rc 0" ||
      echo "@@ rc $?"; } |
    while IFS= read -r line; do
      printf '%s\t%s\n' "$EPOCHREALTIME" "$line" >> "$log"
      [[ "$line" =~ ^(@@\ |Selecting\ previously|Preparing\ to\ unpack|Unpacking\ |Setting\ up\ |\(Reading\ database|Processing\ triggers|update-alternatives:) ]] || printf '  [%s] %s\n' "$(mmss $(($(us "$EPOCHREALTIME") - t0)))" "$line"
    done
  rc=$(sed -n 's/^[0-9.]*\t@@ rc //p' "$log" | tail -n 1)
  return "${rc:-1}"
}
# stamp PATTERN LOG: the time (microseconds) of the last line of LOG that matches PATTERN (awk regex), else empty
stamp() { awk -F'\t' -v p="$1" '$2 ~ p {t = $1} END {if (t != "") {sub(/\./, "", t); sub(/^0+/, "", t); print t}}' "$2"; }
# init scripts and systemd units a root has (a service could start from one of these)
services() { { ls "$1/etc/init.d" 2>/dev/null | sed 's|^|/etc/init.d/|'
               find "$1/lib/systemd/system" "$1/usr/lib/systemd/system" "$1/etc/systemd/system" -maxdepth 2 \
                 \( -name '*.service' -o -name '*.socket' -o -name '*.timer' \) 2>/dev/null | sed "s|^$1||"; } | sort -u; }
new_root() {  # new_root DIR: a minbase root with the repository in /root/wattscope, the host's resolv.conf and local CAs
  if [ -d "$work/minbase" ]; then cp -a "$work/minbase" "$1"; else debootstrap_root "$1"; fi
  git -c safe.directory='*' clone -q --no-hardlinks "$repo" "$1/root/wattscope"
  if [ -n "$patch" ]; then git -C "$1/root/wattscope" apply "$patch" || die "$patch does not apply to the clone"; fi
  cp -L /etc/resolv.conf "$1/etc/resolv.conf"
  # The host's own CA certificates (a TLS-inspecting proxy's, say), as the host trusts them: they join the root's
  # bundle when the ca-certificates package is installed there (its update-ca-certificates reads this directory).
  if ((host_ca)) && compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    mkdir -p "$1/usr/local/share/ca-certificates"
    cp -L /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"
  fi
}
debootstrap_root() {
  # debootstrap mounts /proc and /sys in the root while it works: in a private namespace, so none outlives it.
  unshare --mount --propagation private -- debootstrap --variant=minbase bookworm "$1" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above; $work/debootstrap.log with --keep)"; }
}

note "host: $(nproc) CPUs, load $(load) (1, 5, 15 min); repository $repo at $(git -C "$repo" rev-parse --short HEAD)"
note "work directory: $work"
if ((host_ca)) && compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  note "the roots trust the host's local CAs too: $(cd /usr/local/share/ca-certificates && echo *.crt) (--no-host-ca: not)"
fi
load_start=$(load)
if [ -z "$minbase" ] && ! command -v debootstrap >/dev/null; then
  note "installing debootstrap on the host (a tool of this benchmark; the demo does not need it)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

# ---- 1. the minbase root
tb=$(us "$EPOCHREALTIME")
if [ -n "$minbase" ]; then
  note "the minbase root: a copy of $minbase"
  cp -a "$minbase" "$work/minbase"
  debootstrap_how="a copy of the given minbase root"
else
  note "debootstrap --variant=minbase bookworm ($mirror)"
  debootstrap_root "$work/minbase"
  debootstrap_how="debootstrap --variant=minbase bookworm"
fi
debootstrap_us=$(($(us "$EPOCHREALTIME") - tb))
pkgs "$work/minbase" > "$work/minbase.pkgs"
minbase_bytes=$(size "$work/minbase")
minbase_dpkg=$(kib_sum "$work/minbase.pkgs")
note "minbase root: $(mb "$minbase_bytes") MB on disk (du -sx), $(wc -l < "$work/minbase.pkgs") packages, Installed-Size $(mb "$minbase_dpkg") MB, in $(mmss "$debootstrap_us")"

declare -A R   # results
if ((demo)); then
  # ---- 2. the demo, timed
  root=$work/demo-root
  new_root "$root"
  ws=$root/root/wattscope
  commit=$(git -C "$ws" rev-parse --short HEAD)${patch:+ + ${patch##*/}}
  before_bytes=$(size "$root")
  before_archives=$(size "$root/var/cache/apt/archives")
  before_lists=$(size "$root/var/lib/apt/lists")
  before_aptbin=$(aptbin "$root")
  before_usr=$(size "$root/usr")
  services "$root" > "$work/services.before"
  load_before=$(load)
  note "scripts/demo.sh in the root (commit $commit), load $load_before"
  log=$work/demo.log
  demo_rc=0
  in_root "$root" "$log" bash -c 'cd /root/wattscope && exec scripts/demo.sh' || demo_rc=$?
  load_after=$(load)
  note "demo.sh ended with status $demo_rc, load $load_after"

  s=$(stamp '^@@ start' "$log"); e=$(stamp '^@@ end' "$log")
  npm=$(stamp '^setup: npm ci' "$log"); bld=$(stamp '==> Building' "$log"); run=$(stamp '==> Run 1 of 2' "$log")
  read -r cpu_u cpu_s < <(sed -n 's/^[0-9.]*\t@@ cpu //p' "$log") || { cpu_u='?'; cpu_s='?'; }
  part() { if [ -n "$1" ] && [ -n "$2" ]; then mmss $(($2 - $1)); else echo "?"; fi; }
  R[total]=$(part "$s" "$e"); R[total_us]=$(( ${e:-0} - ${s:-0} ))
  R[apt]=$(part "$s" "${npm:-${bld:-$e}}"); R[npm]=$(part "$npm" "$bld"); R[build]=$(part "$bld" "$run"); R[runs]=$(part "$run" "$e")
  R[built_in]=$(sed -n 's/^[0-9.]*\tbuilt build-demo\/wattscope in \([0-9]*\) s$/\1/p' "$log")

  # ---- 3. what it left
  pkgs "$root" > "$work/demo.pkgs"
  after_bytes=$(size "$root")
  R[delta]=$((after_bytes - before_bytes))
  R[dpkg]=$(($(kib_sum "$work/demo.pkgs") - minbase_dpkg))
  join -v1 <(cut -d' ' -f1 "$work/demo.pkgs") <(cut -d' ' -f1 "$work/minbase.pkgs") > "$work/demo.new"
  R[npkgs]=$(wc -l < "$work/demo.new")
  R[fetched]=$(deb_bytes "$root" <(join "$work/demo.new" "$work/demo.pkgs"))
  R[archives]=$(($(size "$root/var/cache/apt/archives") - before_archives))
  R[lists]=$(($(size "$root/var/lib/apt/lists") - before_lists))
  R[aptbin]=$(($(aptbin "$root") - before_aptbin))
  # du counts whole blocks: many small files (and the .pyc files python3's packages compile when set up) take more
  # than dpkg's Installed-Size says
  R[usr_extra]=$(($(size "$root/usr") - before_usr - R[dpkg]))
  R[node_modules]=$(size "$ws/node_modules"); R[npm_cache]=$(size "$root/root/.npm")
  R[build_dir]=$(size "$ws/build-demo"); R[demo_dir]=$(size "$ws/demo")
  R[other]=$((R[delta] - R[dpkg] - R[usr_extra] - R[archives] - R[lists] - R[aptbin] - R[node_modules] - R[npm_cache] - R[build_dir] - R[demo_dir]))
  # services: a process left running (in the namespace, after demo.sh returned), an init script or unit installed
  { grep -F $'\t@@ leftover ' "$log" || true; } | cut -f2 | sed 's/^@@ leftover /running: /' > "$work/leftovers"
  services "$root" | comm -13 "$work/services.before" - | sed 's/^/installed: /' > "$work/services.new"
  if [ -e "$root/usr/sbin/policy-rc.d" ]; then echo "left behind by setup: /usr/sbin/policy-rc.d" >> "$work/services.new"; fi

  echo
  echo "== the 10 largest packages the demo installed (Installed-Size)"
  join "$work/demo.new" "$work/demo.pkgs" | sort -k3,3nr |
    awk 'NR <= 10 {printf "  %7.1f MB  %s %s\n", $3 * 1024 / 1e6, $1, $2}'   # awk reads it all: no SIGPIPE
  if ((demo_rc)); then
    echo; echo "== scripts/demo.sh FAILED (status $demo_rc); its last lines:"
    grep -v -P '\t@@ ' "$log" | tail -n 8 | cut -f2- | sed 's/^/  /'
  fi
fi

# ---- guest checks: setup removes and downgrades nothing, and keeps a Boost it finds
declare -A G
version_check() {  # version_check BEFORE AFTER: packages of BEFORE missing from AFTER or older there
  local name ver nver
  while read -r name ver _; do
    nver=$(awk -v n="$name" '$1 == n {print $2}' "$2")
    if [ -z "$nver" ]; then echo "removed: $name $ver"
    elif dpkg --compare-versions "$nver" lt "$ver"; then echo "downgraded: $name $ver -> $nver"; fi
  done < "$1"
}
if ((guest)); then
  echo
  echo "== guest check (a): python3-scipy and python3-numba first, then scripts/setup.sh"
  g=$work/guest-scipy; new_root "$g"
  in_root "$g" "$work/guest-scipy.log" bash -c 'apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-scipy python3-numba >/dev/null && echo "installed scipy and numba"' ||
    die "could not install python3-scipy python3-numba in the guest root"
  pkgs "$g" > "$work/guest-scipy.before"
  rc=0; in_root "$g" "$work/guest-scipy.log" bash -c 'cd /root/wattscope && exec scripts/setup.sh' || rc=$?
  pkgs "$g" > "$work/guest-scipy.after"
  version_check "$work/guest-scipy.before" "$work/guest-scipy.after" > "$work/guest-scipy.lost"
  G[a_rc]=$rc; G[a_before]=$(wc -l < "$work/guest-scipy.before"); G[a_lost]=$(wc -l < "$work/guest-scipy.lost")
  G[a_added]=$(join -v1 <(cut -d' ' -f1 "$work/guest-scipy.after") <(cut -d' ' -f1 "$work/guest-scipy.before") | wc -l)
  sed 's/^/  /' "$work/guest-scipy.lost"
  ((keep)) || rm -rf --one-file-system "$g"

  echo
  echo "== guest check (b): libboost1.81-dev first, then scripts/setup.sh and the demo's build"
  g=$work/guest-boost; new_root "$g"
  in_root "$g" "$work/guest-boost.log" bash -c 'apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libboost1.81-dev >/dev/null && echo "installed libboost1.81-dev"' ||
    die "could not install libboost1.81-dev in the guest root"
  pkgs "$g" > "$work/guest-boost.before"
  rc=0; in_root "$g" "$work/guest-boost.log" bash -c 'cd /root/wattscope && exec scripts/setup.sh' || rc=$?
  pkgs "$g" > "$work/guest-boost.after"
  version_check "$work/guest-boost.before" "$work/guest-boost.after" > "$work/guest-boost.lost"
  G[b_rc]=$rc; G[b_lost]=$(wc -l < "$work/guest-boost.lost")
  G[b_asked]=$(sed -n 's/^[0-9.]*\tsetup: installing //p' "$work/guest-boost.log" | tr ' ' '\n' | grep -c '^libboost' || true)
  G[b_boosts]=$(awk '$1 ~ /^libboost[0-9.]*-dev:/ {printf "%s ", $1}' "$work/guest-boost.after")
  sed 's/^/  /' "$work/guest-boost.lost"
  rc=0
  in_root "$g" "$work/guest-boost.log" bash -c 'cd /root/wattscope && scripts/build.sh demo wattscope &&
    sed -n "s/^Boost_DIR:PATH=/Boost_DIR=/p" build-demo/CMakeCache.txt && build-demo/wattscope --version' || rc=$?
  G[b_build]=$rc
  G[b_dir]=$(sed -n 's/^Boost_DIR:PATH=//p' "$g/root/wattscope/build-demo/CMakeCache.txt" 2>/dev/null || true)
  ((keep)) || rm -rf --one-file-system "$g"
fi

# ---- 4. summary (the exit status: 1 when a goal or check failed)
pf() { (($1)) && echo PASS || echo FAIL; }
failed=0
echo
echo "== summary: scripts/demo.sh on a fresh Debian 12 minbase root"
printf '  host: %s CPUs; load (1, 5, 15 min) at start %s' "$(nproc)" "$load_start"
((demo)) && printf ', before the demo %s, after it %s' "$load_before" "$load_after"
printf ', at the end %s\n' "$(load)"
printf '  %-44s %6s   %s\n' "$debootstrap_how" "$(mmss "$debootstrap_us")" \
  "root $(mb "$minbase_bytes") MB, $(wc -l < "$work/minbase.pkgs") packages"
if ((demo)); then
  R[delta_noapt]=$((R[delta] - R[lists] - R[aptbin]))
  ok_time=$((demo_rc == 0 && R[total_us] <= 180000000)); ok_size=$((R[delta] <= 1000000000)); ok_svc=$(( ! $(wc -l < "$work/leftovers") ))
  ((ok_time && ok_size && ok_svc)) || failed=1
  printf '  %-44s %6s   %s\n' "scripts/demo.sh, whole (commit $commit)" "${R[total]}" \
    "$(pf "$ok_time") (goal <= 3:00; exit status $demo_rc; CPU ${cpu_u} user + ${cpu_s} sys)"
  printf '  %-44s %6s   %s\n' "  setup: apt-get update + install" "${R[apt]}" "${R[npkgs]} packages, $(mb "${R[fetched]}") MB of .debs fetched"
  printf '  %-44s %6s\n' "  setup: npm ci --omit=dev" "${R[npm]}"
  printf '  %-44s %6s   %s\n' "  build (scripts/build.sh demo wattscope)" "${R[build]}" "\"built in ${R[built_in]:-?} s\""
  printf '  %-44s %6s   %s\n' "  the two recorded runs and the rest" "${R[runs]}" "(about 24 s of it is the runs' own length)"
  printf '  %-44s %6s   %s\n' "installed: the root's size after - before" "$(mb "${R[delta]}") MB" "$(pf "$ok_size") (goal <= 1000 MB)"
  printf '  %-44s %6s\n' "  packages (dpkg Installed-Size delta)" "$(mb "${R[dpkg]}") MB" \
    "  apt's .deb cache (/var/cache/apt/archives)" "$(mb "${R[archives]}") MB" \
    "  /usr beyond that (du's blocks, .pyc files)" "$(mb "${R[usr_extra]}") MB" \
    "  apt's lists (/var/lib/apt/lists)" "$(mb "${R[lists]}") MB" \
    "  apt's caches (/var/cache/apt/*.bin)" "$(mb "${R[aptbin]}") MB" \
    "  node_modules/" "$(mb "${R[node_modules]}") MB" \
    "  npm's cache (~/.npm)" "$(mb "${R[npm_cache]}") MB" \
    "  build-demo/" "$(mb "${R[build_dir]}") MB" \
    "  demo/ (the two runs' store, CSV, reports)" "$(mb "${R[demo_dir]}") MB" \
    "  the rest (/var/lib/dpkg, /etc, logs, ...)" "$(mb "${R[other]}") MB"
  printf '  %-44s %6s   %s\n' "installed, less apt's lists and caches" "$(mb "${R[delta_noapt]}") MB" \
    "$(pf $((R[delta_noapt] <= 1000000000))) (goal <= 1000 MB; a machine that ran apt before has those)"
  printf '  %-44s %6s   %s\n' "processes left running after the demo" "$(wc -l < "$work/leftovers")" "$(pf "$ok_svc")"
  sed 's/^/    /' "$work/leftovers"
  printf '  %-44s %6s   %s\n' "init scripts / systemd units it installed" "$(wc -l < "$work/services.new")" \
    "(none runs in a chroot; judge each: procps's is a boot-time sysctl, not a daemon)"
  sed 's/^/    /' "$work/services.new"
fi
if ((guest)); then
  ((G[a_rc] == 0 && G[a_lost] == 0 && G[b_rc] == 0 && G[b_lost] == 0 && G[b_asked] == 0 && G[b_build] == 0)) || failed=1
  printf '  %-44s %6s   %s\n' "guest (a): scipy+numba, then setup.sh" "rc ${G[a_rc]}" \
    "$( ((G[a_rc] == 0 && G[a_lost] == 0)) && echo PASS || echo FAIL): of ${G[a_before]} packages, ${G[a_lost]} removed or downgraded; ${G[a_added]} added"
  printf '  %-44s %6s   %s\n' "guest (b): libboost1.81-dev, then setup.sh" "rc ${G[b_rc]}" \
    "$( ((G[b_rc] == 0 && G[b_lost] == 0 && G[b_asked] == 0)) && echo PASS || echo FAIL): ${G[b_lost]} removed or downgraded; Boost packages asked for: ${G[b_asked]}; Boost dev installed: ${G[b_boosts]}"
  printf '  %-44s %6s   %s\n' "guest (b): the demo's build on Boost 1.81" "rc ${G[b_build]}" \
    "$( ((G[b_build] == 0)) && echo PASS || echo FAIL): Boost_DIR ${G[b_dir]:-?}"
fi
exit "$failed"
