#!/usr/bin/env bash
# Builds the release binaries into target/release/ (or $CARGO_TARGET_DIR):
#
#   packaging/build-release.sh
#
# `cargo build --release --locked`, then the shell shim once more as a
# static-pie executable. The shim starts for every shell in the container and
# its nested path does nothing but exec the real shell, so its own start-up
# (the dynamic loader, libgcc_s's CPU probing, the relocations) is most of
# what it costs there: static-pie brings the nested path to the floor of a
# bare exec hop (docs/benchmarks.md). The server and agentsh-unixwrap stay
# dynamic (libc6, libseccomp2). A static glibc program resolves host names
# through the system's NSS modules: use an IP address in shim.conf's
# `server=` (the default, 127.0.0.1, needs no lookup at all).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "build-release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
cargo build --release --locked -p agentsh -p agentsh-unixwrap -p agentsh-shell-shim
cargo rustc --release --locked -p agentsh-shell-shim --bin agentsh-shell-shim \
  -- -C target-feature=+crt-static
shim="${CARGO_TARGET_DIR:-target}/release/agentsh-shell-shim"
if ! file_out="$(LC_ALL=C readelf -d "$shim" 2>&1)" || grep -q '(NEEDED)' <<<"$file_out"; then
  echo "build-release.sh: $shim is not static: $(grep '(NEEDED)' <<<"$file_out" | tr -s ' ' | head -3)" >&2
  exit 1
fi
echo "built: ${CARGO_TARGET_DIR:-target}/release/{agentsh,agentsh-unixwrap,agentsh-shell-shim} (the shim static-pie)"
