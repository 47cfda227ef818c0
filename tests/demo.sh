#!/usr/bin/env bash
# The demo (the README's main command): builds agentsh, then runs a short
# agent session in a sandbox the way an SDK runs one, without touching this
# machine's /bin/sh: a private mount namespace whose /usr and /etc are
# overlays, `agentsh server` on the embedded defaults (config and the
# agent-default policy) inside it, the shim installed there by
# `agentsh shim install --bash`, and an E2B-style daemon spawning the
# agent's commands. It prints each command's output and the audit trail as
# a table, and exits non-zero if anything did not go as it claims.
# Needs root (mount namespace, seccomp listener).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (a private mount namespace and seccomp listeners); run: sudo $0" >&2
  exit 1
fi
bash tests/setup.sh
cargo build --workspace --bins -q
bash packaging/build-static.sh
exec target/debug/agentsh-demo
