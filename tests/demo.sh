#!/usr/bin/env bash
# The demo: builds agentsh, starts the server on the embedded defaults
# (embedded config and agent-default policy; only the state and audit paths
# point into a temporary directory), runs a supervised `sh -c` the way a
# sandbox SDK would, and prints the audit trail.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
cargo build --workspace --bins -q
bin=target/debug
work=$(mktemp -d -t agentsh-demo.XXXXXX)
cleanup() { [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
port=18080
cat >"$work/config.yaml" <<CONF
server:
  http:
    addr: "127.0.0.1:$port"
state_dir: $work/state
audit:
  jsonl: $work/audit.jsonl
CONF
"$bin/agentsh" server --config "$work/config.yaml" 2>"$work/server.log" &
srv=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/healthz')" 2>/dev/null && break
  sleep 0.1
done
script='echo "hello from a supervised shell (pid $$)"; ls / >/dev/null && echo "ls ran"; git --version 2>/dev/null || true; curl --version || echo "curl was refused (exit $?)"; mount -t tmpfs none /mnt || echo "mount was refused (exit $?)"'
echo "== running: sh -c '$script'"
echo
"$bin/agentsh-test-run" --server "http://127.0.0.1:$port" --session demo -- /bin/sh -c "$script" || true
echo
echo "== audit trail (agentsh events --session demo --format table)"
"$bin/agentsh" events --server "http://127.0.0.1:$port" --session demo --format table
