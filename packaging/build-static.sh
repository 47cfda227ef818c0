#!/usr/bin/env bash
# Builds the two binaries that run before any filter exists as static-pie:
#
#   packaging/build-static.sh [--profile static|release]
#
# agentsh-shell-shim (installed as /bin/sh) and agentsh-unixwrap run in every
# SDK-spawned shell before the seccomp filter and Landlock are in place. Linked
# statically, no dynamic loader runs in them: LD_PRELOAD, LD_AUDIT,
# LD_LIBRARY_PATH and a writable library directory have nothing to load into
# them, and start-up costs less. `--profile static` (the default: what the
# tests, the demo and tests/run.sh use) writes target/static/, a profile of its
# own (`[profile.static]` in Cargo.toml) so a later plain `cargo build` or
# `cargo test` does not overwrite them; `--profile release` (what
# packaging/build-release.sh uses) writes target/release/. Each result is
# checked: no NEEDED entry, no program interpreter. Needs glibc's static
# libc (libc6-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=static
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs static or release}"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-static.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$profile" in static|release) ;; *) echo "build-static.sh: --profile must be static or release" >&2; exit 2 ;; esac
dir="${CARGO_TARGET_DIR:-target}/$profile"
for b in agentsh-shell-shim agentsh-unixwrap; do
  # A cold build takes a minute or more: say what is happening.
  echo "build-static.sh: building $b ($profile, static-pie)..." >&2
  cargo rustc -q --locked --profile "$profile" -p "$b" --bin "$b" -- -C target-feature=+crt-static
  if ! dyn="$(LC_ALL=C readelf -d -l "$dir/$b" 2>&1)" || grep -qE '\(NEEDED\)|Requesting program interpreter' <<<"$dyn"; then
    echo "build-static.sh: $dir/$b is not static: $(grep -E '\(NEEDED\)|interpreter' <<<"$dyn" | tr -s ' ' | head -3)" >&2
    exit 1
  fi
done
echo "built: $dir/{agentsh-shell-shim,agentsh-unixwrap} (static-pie)"
