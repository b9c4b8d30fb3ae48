"""Shell scripts run inside a sandbox container (kubernetes pods, docker containers): POSIX sh only.

They run as the container's user, with nothing of clawgym installed there, so they use `sh`,
`rm`, `chmod` and `kill` and nothing else.
"""

# $1: a writable dir, then the writable dirs nested in it (their own mounts: kept whole, and their
# parents only emptied around them). Links are removed, never followed.
RESET = r"""dir=$1; shift
nl='
'
keep="$nl$(printf '%s\n' "$@")$nl"
empty() {
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    case "$keep" in
      *"$nl$e$nl"*) continue ;;
      *"$nl$e/"*) if [ -d "$e" ] && [ ! -L "$e" ]; then empty "$e" || return 1; continue; fi ;;
    esac
    [ -L "$e" ] || chmod -R u+rwX -- "$e" 2>/dev/null
    rm -rf -- "$e" || return 1
  done
}
chmod u+rwx -- "$dir" 2>/dev/null; empty "$dir"
"""

# Every process but the container's PID 1 (what keeps it alive) and this shell: descendants that
# left their session or process group included.
KILL_ALL = "kill -KILL -1 2>/dev/null; exit 0"
