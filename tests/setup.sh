#!/usr/bin/env bash
# Installs what building and testing agentsh needs on a Debian/Ubuntu machine.
# Sourced by tests/run.sh and tests/demo.sh; safe to run twice.
set -euo pipefail

need_pkgs=()
pkg-config --exists libseccomp 2>/dev/null || need_pkgs+=(libseccomp-dev)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
command -v cc >/dev/null || need_pkgs+=(gcc)
command -v python3 >/dev/null || need_pkgs+=(python3)
command -v setpriv >/dev/null || need_pkgs+=(util-linux)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "agentsh setup: missing packages ${need_pkgs[*]}; run as root (or sudo) so they can be installed" >&2
    exit 1
  fi
  echo "agentsh setup: installing ${need_pkgs[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "agentsh setup: cargo is not installed; install a Rust toolchain (rustup) >= 1.80" >&2
  exit 1
fi
