#!/usr/bin/env bash
# Builds the release archive: agentsh, agentsh-unixwrap, agentsh-shell-shim
# and install.sh in agentsh-<version>-<arch>/, as a .tar.gz:
#
#   packaging/archive.sh [--from DIR] [--out DIR]
#
# The binaries come from target/release/ (packaging/build-release.sh first),
# or from --from DIR; the shim and unixwrap must be static-pie (checked). The
# archive is written to --out (default target/archive/). A user without root
# installs from it with `./install.sh --user` (docs/wrap.md).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
from="${CARGO_TARGET_DIR:-$repo/target}/release"
out="${CARGO_TARGET_DIR:-$repo/target}/archive"
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from="${2:?--from needs a directory}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "archive.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
version="$(sed -n '/^\[workspace.package\]/,/^\[/{s/^version *= *"\(.*\)"/\1/p}' "$repo/Cargo.toml")"
arch="$(uname -m)"
name="agentsh-$version-$arch"
for b in agentsh agentsh-unixwrap agentsh-shell-shim; do
  [ -x "$from/$b" ] || { echo "archive.sh: $from/$b is missing: run packaging/build-release.sh first" >&2; exit 1; }
done
for b in agentsh-unixwrap agentsh-shell-shim; do
  if file -L "$from/$b" | grep -q 'dynamically linked'; then
    echo "archive.sh: $from/$b is dynamically linked; build it with packaging/build-static.sh" >&2
    exit 1
  fi
done
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name" "$out"
for b in agentsh agentsh-unixwrap agentsh-shell-shim; do
  install -m 0755 "$from/$b" "$stage/$name/$b"
done
install -m 0755 "$repo/packaging/install.sh" "$stage/$name/install.sh"
tar -C "$stage" --owner=0 --group=0 -czf "$out/$name.tar.gz" "$name"
echo "built: $out/$name.tar.gz"
