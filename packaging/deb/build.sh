#!/usr/bin/env bash
# Builds the agentsh Debian package from binaries cargo already built.
#
#   packaging/deb/build.sh [--profile debug|release] [--out DIR]
#
# Needs dpkg-deb and dpkg-shlibdeps (package dpkg-dev); no other tool. The
# binaries are taken from target/<profile>/ (run `cargo build --release
# --locked` first; `--profile debug` is what the install test uses). The
# version is the workspace's; Depends is computed by dpkg-shlibdeps from what
# the binaries really link (libc6, libseccomp2). Prints the .deb's path.
set -euo pipefail

profile=release
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs debug or release}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$profile" in debug|release) ;; *) echo "build.sh: --profile must be debug or release" >&2; exit 2 ;; esac

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}/$profile"
out="${out:-$repo/target/deb}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing: apt-get install dpkg-dev" >&2; exit 1; }
done
bins=(agentsh agentsh-unixwrap agentsh-shell-shim)
for b in "${bins[@]}"; do
  [ -x "$target/$b" ] || {
    echo "build.sh: $target/$b is missing: run \`cargo build$([ "$profile" = release ] && echo ' --release') --locked\` first" >&2
    exit 1
  }
done

# The workspace version, from [workspace.package].
version="$(sed -n '/^\[workspace.package\]/,/^\[/{s/^version *= *"\(.*\)"/\1/p}' "$repo/Cargo.toml")"
[ -n "$version" ] || { echo "build.sh: no version in [workspace.package] of Cargo.toml" >&2; exit 1; }
arch="$(dpkg-architecture -qDEB_HOST_ARCH)"
maintainer="${DEB_MAINTAINER:-agentsh maintainers <maintainers@agentsh.invalid>}"

work="$(mktemp -d "${TMPDIR:-/tmp}/agentsh-deb.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"

# --- files -------------------------------------------------------------------
install -d -m 0755 "$root/usr/bin" "$root/etc/agentsh/policies" "$root/lib/systemd/system" \
  "$root/usr/share/doc/agentsh" "$root/DEBIAN"
for b in "${bins[@]}"; do
  install -m 0755 "$target/$b" "$root/usr/bin/$b"
  # Release binaries lose their symbols (Debian policy 10.1); debug builds are
  # for tests and keep them.
  if [ "$profile" = release ]; then
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/$b"
  fi
done
install -m 0644 "$repo/etc/agentsh/config.yaml" "$repo/etc/agentsh/shim.conf" "$root/etc/agentsh/"
install -m 0644 "$repo"/etc/agentsh/policies/*.yaml "$root/etc/agentsh/policies/"
install -m 0644 "$repo/packaging/systemd/agentsh.service" "$root/lib/systemd/system/agentsh.service"
install -m 0644 "$repo/README.md" "$repo"/docs/*.md "$root/usr/share/doc/agentsh/"
install -m 0644 "$here/copyright" "$root/usr/share/doc/agentsh/copyright"
# Man pages, if the tree has any (docs/man/*.N).
if compgen -G "$repo/docs/man/*.[1-8]" >/dev/null; then
  for m in "$repo"/docs/man/*.[1-8]; do
    sec="${m##*.}"
    install -d -m 0755 "$root/usr/share/man/man$sec"
    gzip -9n -c "$m" >"$root/usr/share/man/man$sec/$(basename "$m").gz"
    chmod 0644 "$root/usr/share/man/man$sec/$(basename "$m").gz"
  done
fi
printf 'agentsh (%s) unstable; urgency=medium\n\n  * Built from the agentsh source tree.\n\n -- %s  %s\n' \
  "$version" "$maintainer" "$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}")" |
  gzip -9n >"$root/usr/share/doc/agentsh/changelog.gz"
chmod 0644 "$root/usr/share/doc/agentsh/changelog.gz"

# --- control -------------------------------------------------------------------
# dpkg-shlibdeps wants a source tree layout: a debian/control in its cwd.
mkdir -p "$work/src/debian"
printf 'Source: agentsh\n\nPackage: agentsh\nArchitecture: any\n' >"$work/src/debian/control"
depends="$(cd "$work/src" && dpkg-shlibdeps -O -e"$root/usr/bin/agentsh" -e"$root/usr/bin/agentsh-unixwrap" \
  -e"$root/usr/bin/agentsh-shell-shim" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
[ -n "$depends" ] || { echo "build.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

(cd "$root" && find etc -type f | sort | sed 's|^|/|') >"$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do
  install -m 0755 "$here/$s" "$root/DEBIAN/$s"
done
installed_size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat >"$root/DEBIAN/control" <<EOF
Package: agentsh
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $depends
Section: admin
Priority: optional
Description: kernel-enforced policy on every command an AI agent runs
 agentsh puts every shell a sandbox container runs under a seccomp
 user-notify supervisor and Landlock: each exec is checked against a policy
 and audited, before the program runs.
 .
 This package ships the server (agentsh), the exec wrapper (agentsh-unixwrap),
 the shell shim (agentsh-shell-shim), the default configuration and policies,
 and a systemd unit. It never replaces /bin/sh by itself: that is an explicit
 `agentsh shim install`.
EOF

deb="$out/agentsh_${version}_${arch}.deb"
dpkg-deb --build --root-owner-group -Zxz "$root" "$deb" >/dev/null
echo "$deb"
