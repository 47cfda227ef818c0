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
# The escape suite and the agent-session test run these inside supervised trees.
[ -x /usr/bin/python3 ] || need_pkgs+=(python3)
[ -x /usr/bin/perl ] || need_pkgs+=(perl)
command -v strace >/dev/null || need_pkgs+=(strace)
command -v curl >/dev/null || need_pkgs+=(curl)
command -v git >/dev/null || need_pkgs+=(git)
command -v make >/dev/null || need_pkgs+=(make)
# A real Go program's os/exec under supervision (tests/tests/exec_races.rs).
[ -x /usr/bin/go ] || need_pkgs+=(golang-go)
[ -x /usr/bin/node ] || need_pkgs+=(nodejs)
# Packaging: the .deb build (dpkg-shlibdeps), the install test's Debian root,
# and `systemd-analyze verify` of the unit.
command -v dpkg-shlibdeps >/dev/null || need_pkgs+=(dpkg-dev)
[ -x /usr/sbin/debootstrap ] || need_pkgs+=(debootstrap)
command -v systemd-analyze >/dev/null || need_pkgs+=(systemd)
# gVisor, for the ptrace backend's tests under what Modal runs; podman and
# runc, for the recipes in real container runtimes (tests/tests/real_runtimes.rs).
command -v runsc >/dev/null || need_pkgs+=(runsc)
command -v podman >/dev/null || need_pkgs+=(podman)
command -v runc >/dev/null || need_pkgs+=(runc)
# The man pages' test renders them at 80 columns; the egress tests ask DNS.
command -v man >/dev/null || need_pkgs+=(man-db)
command -v dig >/dev/null || need_pkgs+=(bind9-dnsutils)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "agentsh setup: missing packages ${need_pkgs[*]}; run as root (or sudo) so they can be installed" >&2
    exit 1
  fi
  echo "agentsh setup: installing ${need_pkgs[*]}" >&2
  apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
# qemu, for the tests that boot Debian's 6.1 kernel in a VM (tests/src/vm.rs):
# without the recommends (25 packages instead of 170).
if ! command -v qemu-system-x86_64 >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "agentsh setup: missing package qemu-system-x86; run as root (or sudo) so it can be installed" >&2
    exit 1
  fi
  echo "agentsh setup: installing qemu-system-x86 (without recommends)" >&2
  [ -n "${apt_updated:-}" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "agentsh setup: cargo is not installed; install a Rust toolchain (rustup) >= 1.80" >&2
  exit 1
fi
