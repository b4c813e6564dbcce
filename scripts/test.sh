#!/usr/bin/env bash
# The full test suite, on a fresh Debian machine or a developer's: installs every tool
# the tests need, then checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

# Tools the tests drive for real. Each entry: command to probe, Debian package.
apt_tools=(
  "git:git"
)
missing=()
for entry in "${apt_tools[@]}"; do
  cmd=${entry%%:*}
  pkg=${entry#*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required (the Rust toolchain)" >&2
  exit 1
fi

# Tests that need a tool skip loudly when it is missing on a developer machine; here
# every tool has just been installed, so a skip is a failure.
export BOSUN_REQUIRE_TOOLS=1

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
log "cargo test"
cargo test --workspace 2>&1 | tee target/test-output.txt
if grep -q "SKIPPED (tool missing)" target/test-output.txt; then
  echo "a real-component test was skipped: see 'SKIPPED (tool missing)' above" >&2
  exit 1
fi
