#!/usr/bin/env bash
# The test command: installs build dependencies, builds every binary, runs
# every test (unit and end-to-end on the real kernel). Needs root: the
# end-to-end tests load seccomp listeners and use private mount namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
cargo build --workspace --all-targets
# The shim and unixwrap as they ship: static-pie, in target/static/ (what the
# tests' bin() returns for them).
bash packaging/build-static.sh
cargo test --workspace --no-fail-fast
