#!/usr/bin/env bash
# What agentsh costs, side by side: sudo ./bench/run.sh [--quick]
#
# Installs what it needs (the test dependencies, a static libc for `hop`,
# xz and curl for the workload), builds the release binaries, compiles the
# static `hop` (the floor of the nested path), fetches the `./configure`
# workload from Debian's source packages (checked against the archive's
# SHA-256, cached in /var/cache/agentsh-bench), then runs agentsh-bench.
# Results: printed, and in target/bench/results.{md,json}.
# This machine's /bin/sh is never touched (private mount namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    echo "Options: --quick (fewer rounds, about 1 min), --out DIR (default target/bench)."
    echo "Method and figures: docs/benchmarks.md"
    exit 0 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/run.sh: needs root (mount namespaces, seccomp listeners): sudo ./bench/run.sh" >&2
  exit 1
fi
bash tests/setup.sh
need=()
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev)
command -v xz >/dev/null || need+=(xz-utils)
command -v curl >/dev/null || need+=(curl)
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release --workspace --bins
# What ships: the release binaries with the shim static-pie (after the line
# above, which would rebuild it dynamic).
packaging/build-release.sh
mkdir -p target/bench
cc -O2 -static -o target/bench/hop bench/hop.c

# The workload: GNU hello's upstream tarball, as Debian ships it (bookworm).
cache=/var/cache/agentsh-bench
mkdir -p "$cache"
pkg=hello suite=bookworm mirror=http://deb.debian.org/debian
tarball=""
if [ ! -s "$cache/$pkg.sources" ]; then
  if curl -fsSL --max-time 120 -o "$cache/Sources.xz" "$mirror/dists/$suite/main/source/Sources.xz"; then
    xz -dc "$cache/Sources.xz" | awk -v p="$pkg" '$0=="Package: "p{on=1} on&&/^$/{on=0} on' >"$cache/$pkg.sources.tmp"
    mv "$cache/$pkg.sources.tmp" "$cache/$pkg.sources"
    rm -f "$cache/Sources.xz"
  fi
fi
if [ -s "$cache/$pkg.sources" ]; then
  dir=$(awk '/^Directory:/{print $2}' "$cache/$pkg.sources")
  read -r sha _ name < <(awk '/^Checksums-Sha256:/{on=1;next} on&&/^ /{print} on&&!/^ /{on=0}' "$cache/$pkg.sources" | grep 'orig\.tar\.gz$')
  if [ ! -s "$cache/$name" ] || ! echo "$sha  $cache/$name" | sha256sum -c --quiet - 2>/dev/null; then
    rm -f "$cache/$name"
    if curl -fsSL --max-time 120 -o "$cache/$name.tmp" "$mirror/$dir/$name"; then
      # A tarball that does not match the archive's checksum is never run.
      echo "$sha  $cache/$name.tmp" | sha256sum -c --quiet -
      mv "$cache/$name.tmp" "$cache/$name"
    fi
  fi
  if [ -s "$cache/$name" ]; then
    tarball="$cache/$name"
  else
    echo "bench/run.sh: cannot fetch $mirror/$dir/$name; the configure pair is skipped" >&2
  fi
else
  echo "bench/run.sh: cannot read Debian's source index; the configure pair is skipped" >&2
fi

exec target/release/agentsh-bench run --hop target/bench/hop --out target/bench \
  ${tarball:+--configure-tarball "$tarball"} "$@"
