#!/usr/bin/env bash
# Builds the release binaries into target/release/ (or $CARGO_TARGET_DIR):
#
#   packaging/build-release.sh
#
# `cargo build --release --locked`, then the shell shim and agentsh-unixwrap
# once more as static-pie executables (packaging/build-static.sh --profile
# release). Both run before any filter exists, so no dynamic loader may run in
# them (LD_PRELOAD, LD_AUDIT); the shim starts for every shell in the container
# and its nested path does nothing but exec the real shell, so static-pie also
# brings that path to the floor of a bare exec hop (docs/benchmarks.md). The
# server stays dynamic (libc6, libseccomp2: it compiles the filters). A static
# glibc program resolves host names through the system's NSS modules: use an
# IP address in shim.conf's `server=` (the default, 127.0.0.1, needs no lookup).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "build-release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
cargo build --release --locked -p agentsh -p agentsh-unixwrap -p agentsh-shell-shim
bash packaging/build-static.sh --profile release
echo "built: ${CARGO_TARGET_DIR:-target}/release/{agentsh,agentsh-unixwrap,agentsh-shell-shim} (shim and unixwrap static-pie)"
