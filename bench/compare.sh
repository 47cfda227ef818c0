#!/usr/bin/env bash
# The supervisor's time per exec, this checkout against other commits, side
# by side: sudo ./bench/compare.sh [--rounds R] [--n N] REV [REV ...]
#
# Builds the release `agentsh` of each REV in a detached worktree under
# target/compare/ (kept, so a second run is quick) and of this checkout,
# then runs `agentsh-bench compare`: all servers at once, each workload
# (a dash loop of /bin/true, an exec from a threaded process, vfork children
# of a threaded process) run against each server in turn, the order
# rotating every round. The REVs must speak this checkout's wrap-init (the
# wire format is versioned). Results: printed, and in
# target/compare/results.md. Method: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/compare.sh: needs root (mount namespaces, seccomp listeners)" >&2
  exit 1
fi
opts=()
revs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds|--n) opts+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) revs+=("$1"); shift ;;
  esac
done
bash tests/setup.sh
cargo build --release --workspace --bins
servers=()
mkdir -p target/compare
for rev in "${revs[@]}"; do
  sha=$(git rev-parse --short "$rev^{commit}")
  wt="target/compare/$sha"
  [ -d "$wt" ] || git worktree add --detach "$wt" "$sha" >/dev/null
  (cd "$wt" && cargo build --release -p agentsh --bin agentsh)
  servers+=(--server "$rev=$PWD/$wt/target/release/agentsh")
done
servers+=(--server "this=$PWD/target/release/agentsh")
exec target/release/agentsh-bench compare "${servers[@]}" "${opts[@]}" \
  --out target/compare/results.md
