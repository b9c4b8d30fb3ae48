#!/usr/bin/env bash
# The local Kubernetes cluster for tests, benches and CI, from ../shared/k8s-local (real Kubernetes
# 1.20, no Docker). Several users (pytest sessions, benches) share one cluster through leases.
#
#   tests/k8s_cluster.sh prepare        # apt packages, the 4 binaries (built once, ~7-20 min), helm+kubectl,
#                                       # images incl. localhost/python-node:bookworm; cached in $K8S_LOCAL_DIR
#   tests/k8s_cluster.sh up [PID]       # prepare, start the cluster if it is down, and lease it for
#                                       # process PID (default: the caller); prints the kubeconfig path
#   tests/k8s_cluster.sh down [PID]     # drop PID's lease; stop the cluster when no live lease is left,
#                                       # but only if a lease holder started it (a cluster someone
#                                       # started by hand, or CI, stays up)
#   tests/k8s_cluster.sh status         # exit 0 = up and healthy
#
# Needs root and Debian 12. Binaries and images live outside the repo: K8S_LOCAL_DIR (default
# ~/.cache/k8s-local); K8S_LOCAL may point at another copy of the k8s-local script.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
K=${K8S_LOCAL:-$repo/../shared/k8s-local/k8s-local}
export K8S_LOCAL_DIR=${K8S_LOCAL_DIR:-$HOME/.cache/k8s-local}
leases=$K8S_LOCAL_DIR/clawgym-leases
[ -x "$K" ] || { echo "k8s_cluster.sh: no k8s-local script at $K (set K8S_LOCAL)" >&2; exit 2; }

prepare() {
  local t0=$SECONDS
  "$K" install >&2
  "$K" build >&2
  "$K" helm >&2
  "$K" images --debian >&2
  echo "k8s_cluster.sh: prepared in $((SECONDS - t0)) s (cache: $K8S_LOCAL_DIR)" >&2
}

live_leases() {  # drops leases of processes that are gone; prints how many are left
  local n=0 f
  for f in "$leases"/[0-9]*; do
    [ -e "$f" ] || continue
    if kill -0 "${f##*/}" 2>/dev/null; then n=$((n + 1)); else rm -f "$f"; fi
  done
  echo "$n"
}

locked() {  # runs "$@" holding the lease lock
  mkdir -p "$leases"
  exec 9>"$leases/.lock"
  flock 9
  "$@"
}

# k8s-local puts the host's sysctls back to what it recorded before its first `up`, ever; where that
# record predates dockerd, it turns IPv4 forwarding off under a running Docker engine, and every
# container on its bridge (image builds included) loses the network. Forwarding stays as it was.
keeping_forwarding() {
  local was rc=0
  was=$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null || echo "")
  "$@" || rc=$?
  if [ -n "$was" ] && [ "$(cat /proc/sys/net/ipv4/ip_forward)" != "$was" ]; then
    echo "$was" >/proc/sys/net/ipv4/ip_forward && echo "k8s_cluster.sh: net.ipv4.ip_forward kept at $was" >&2
  fi
  return "$rc"
}

do_up() {
  local pid=$1 t0=$SECONDS
  if ! "$K" status >/dev/null 2>&1; then
    keeping_forwarding "$K" up >/dev/null
    touch "$leases/.started-by-lease"
    echo "k8s_cluster.sh: up in $((SECONDS - t0)) s" >&2
  fi
  touch "$leases/$pid"
  echo "$K8S_LOCAL_DIR/kubeconfig"
}

do_down() {
  rm -f "$leases/$1"
  if [ "$(live_leases)" = 0 ] && [ -e "$leases/.started-by-lease" ]; then
    keeping_forwarding "$K" down >&2
    rm -f "$leases/.started-by-lease"
  else
    echo "k8s_cluster.sh: cluster left up (other leases, or not started by one)" >&2
  fi
}

case "${1:-}" in
  prepare) prepare ;;
  up) prepare; locked do_up "${2:-$PPID}" ;;
  down) locked do_down "${2:-$PPID}" ;;
  status) "$K" status ;;
  *) echo "usage: $0 prepare|up [PID]|down [PID]|status" >&2; exit 2 ;;
esac
