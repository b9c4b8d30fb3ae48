#!/usr/bin/env bash
# The local Kubernetes cluster for tests and CI, from ../shared/k8s-local (real Kubernetes 1.20, no Docker).
#
#   tests/k8s_cluster.sh prepare   # apt packages, build the 4 binaries once (~7-11 min), helm+kubectl,
#                                  # images incl. localhost/python-node:bookworm; all cached in $K8S_LOCAL_DIR
#   tests/k8s_cluster.sh up        # prepare, then start the cluster; prints the kubeconfig path (last stdout line)
#   tests/k8s_cluster.sh down      # stop everything (caches stay)
#   tests/k8s_cluster.sh status    # exit 0 = up and healthy
#
# Needs root and Debian 12. Binaries and images live outside the repo: K8S_LOCAL_DIR (default
# ~/.cache/k8s-local); K8S_LOCAL may point at another copy of the k8s-local script.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
K=${K8S_LOCAL:-$repo/../shared/k8s-local/k8s-local}
export K8S_LOCAL_DIR=${K8S_LOCAL_DIR:-$HOME/.cache/k8s-local}
[ -x "$K" ] || { echo "k8s_cluster.sh: no k8s-local script at $K (set K8S_LOCAL)" >&2; exit 2; }

prepare() {
  local t0=$SECONDS
  "$K" install >&2
  "$K" build >&2
  "$K" helm >&2
  "$K" images --debian >&2
  echo "k8s_cluster.sh: prepared in $((SECONDS - t0)) s (cache: $K8S_LOCAL_DIR)" >&2
}

case "${1:-}" in
  prepare) prepare ;;
  up)
    prepare
    t0=$SECONDS
    kubeconfig=$("$K" up)
    echo "k8s_cluster.sh: up in $((SECONDS - t0)) s" >&2
    echo "$kubeconfig"
    ;;
  down) "$K" down >&2 ;;
  status) "$K" status ;;
  *) echo "usage: $0 prepare|up|down|status" >&2; exit 2 ;;
esac
