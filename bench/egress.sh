#!/usr/bin/env bash
# Egress sandbox benchmark: what the hosted runners' sandbox costs an engine.
#
#   - engine start: making the phase's network namespace and proxy, then `terraform
#     version` inside it, against `terraform version` alone (BENCH_EGRESS_ROUNDS rounds);
#   - a BENCH_EGRESS_MB download (default 50) by curl from a loopback server: from inside
#     the namespace through the egress proxy (plain HTTP, and a CONNECT tunnel as https
#     uses) against curl directly, median of 9 each, interleaved.
#
# The peer is the engine without the sandbox (what a self-hosted runner, or a server run
# with --egress-unrestricted, gives). Goals: under 50 ms added per phase, and at least
# 90 % of the direct throughput.
#
# Usage: bench/egress.sh   (as root: it makes network namespaces; needs terraform, curl)
# Knobs (environment): BENCH_EGRESS_ROUNDS=30 BENCH_EGRESS_MB=50
# stdout: the figures. stderr: cargo's build output.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty)'); release build" >&2
cargo test --release -p bosun-runner egress::tests::egress_figures -- \
    --ignored --nocapture --test-threads 1 2>&1 |
    grep -oE '(engine start|download) .*' ||
    { echo "the figures test did not print its figures" >&2; exit 1; }
