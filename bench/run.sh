#!/usr/bin/env bash
# What agentsh costs, side by side: sudo ./bench/run.sh [--quick]
#
# Installs what it needs (the test dependencies, a static libc for `hop`,
# xz and curl for the workload), builds the release binaries, compiles the
# static `hop` (the floor of the nested path), fetches the `./configure`
# workload from Debian's source packages (checked against the archive's
# SHA-256, cached in /var/cache/agentsh-bench) and a gVisor of today's
# default platform for step 11 (bookworm-backports' runsc, unpacked there,
# never installed), then runs agentsh-bench.
# Results: printed, and in target/bench/results.{md,json}.
# This machine's /bin/sh is never touched (private mount namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
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

# A gVisor of today's default platform (systrap; the installed bookworm
# runsc is a 2022-12 build on the ptrace platform, where every sandbox
# syscall is ten times slower, the unsupervised side's too): bookworm's
# backports build, unpacked into the cache (never installed), checked
# against the archive's SHA-256. Step 11 runs under it beside the other.
runsc_new=""
bpo=bookworm-backports arch=$(dpkg --print-architecture) https=https://deb.debian.org/debian
rdir="$cache/runsc-$bpo"
if [ ! -x "$rdir/usr/bin/runsc" ]; then
  if curl -fsSL --max-time 120 -o "$cache/Packages.xz" "$https/dists/$bpo/main/binary-$arch/Packages.xz"; then
    entry=$(xz -dc "$cache/Packages.xz" | awk '$0=="Package: runsc"{on=1} on&&/^$/{on=0} on' || true)
    rm -f "$cache/Packages.xz"
    file=$(awk '/^Filename:/{print $2}' <<<"$entry")
    sum=$(awk '/^SHA256:/{print $2}' <<<"$entry")
    if [ -n "$file" ] && [ -n "$sum" ] && curl -fsSL --max-time 300 -o "$cache/runsc.deb" "$https/$file"; then
      # A package that does not match the archive's checksum is never run.
      if echo "$sum  $cache/runsc.deb" | sha256sum -c --quiet -; then
        rm -rf "$rdir.tmp" && dpkg-deb -x "$cache/runsc.deb" "$rdir.tmp" && rm -rf "$rdir" && mv "$rdir.tmp" "$rdir"
      fi
      rm -f "$cache/runsc.deb"
    fi
  fi
fi
if [ -x "$rdir/usr/bin/runsc" ]; then
  runsc_new="$rdir/usr/bin/runsc"
else
  echo "bench/run.sh: cannot fetch runsc from $bpo; step 11 runs under the installed runsc only" >&2
fi

exec target/release/agentsh-bench run --hop target/bench/hop --out target/bench \
  ${tarball:+--configure-tarball "$tarball"} ${runsc_new:+--runsc "$runsc_new"} "$@"
