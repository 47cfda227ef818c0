#!/bin/sh
# Installs agentsh from this archive (the directory this script is in).
#
#   ./install.sh --user     agentsh and agentsh-unixwrap into ~/.local/bin
#                           (or $XDG_BIN_HOME): what `agentsh wrap` needs, no root
#   ./install.sh --system   the three binaries into /usr/bin (root): for images
#                           and hosts whose /bin/sh becomes the shell shim
#
# Then `agentsh detect` says what this machine offers. agentsh's server is
# dynamically linked against libseccomp (libseccomp2 on Debian and Ubuntu,
# libseccomp on Fedora and Arch): it compiles every tree's filter.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
case "${1:-}" in
  --user)
    to="${XDG_BIN_HOME:-${HOME:?HOME is not set}/.local/bin}"
    bins="agentsh agentsh-unixwrap"
    ;;
  --system)
    [ "$(id -u)" = 0 ] || { echo "install.sh --system: run it as root (or use --user)" >&2; exit 2; }
    to=/usr/bin
    bins="agentsh agentsh-unixwrap agentsh-shell-shim"
    ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install.sh: say --user (no root: ~/.local/bin) or --system (root: /usr/bin)" >&2; exit 2 ;;
esac
mkdir -p "$to"
for b in $bins; do
  # Beside the old one, then renamed over it: a running agentsh keeps its file.
  cp "$here/$b" "$to/.$b.new"
  chmod 0755 "$to/.$b.new"
  mv -f "$to/.$b.new" "$to/$b"
done
echo "installed $bins in $to"
case ":${PATH:-}:" in
  *":$to:"*) ;;
  *)
    # Debian's and Ubuntu's ~/.profile add ~/.local/bin once it exists.
    if [ "$to" = "${HOME:-}/.local/bin" ] && grep -qs '\.local/bin' "${HOME:-}/.profile"; then
      echo "note: $to is not on this shell's PATH yet; your ~/.profile adds it: open a new terminal (or log in again)"
    else
      echo "note: $to is not on your PATH; add it (e.g. in ~/.profile: PATH=\"$to:\$PATH\")"
    fi ;;
esac
"$to/agentsh" --version >/dev/null || {
  echo "install.sh: $to/agentsh does not run here (libseccomp missing? see above)" >&2
  exit 1
}
