#!/usr/bin/env bash
# Feedback benchmark: what reporting a run back to GitHub costs, measured against the
# GitHub double (bosun-testkit), which checks every call against GitHub's REST
# description. BENCH_FEEDBACK_RUNS pull requests (default 100) are opened one after the
# other; each starts one proposed run, which the bench plans to its end over the runner
# protocol, then waits for its check run to be completed on the double. Reported:
#
#   - check-run calls per run, comment calls per run, token requests for feedback;
#   - run end -> check run completed: p50, p99, max (polled every 2 ms).
#
# No peer is measured beside it: none of the GitOps tools on this machine reports check
# runs (Atlantis comments only), so these are Bosun's own figures against the issue's
# goals (<= 4 calls per run on the happy path, p99 < 2 s from run end to completion).
#
# Usage: bench/feedback.sh            (from anywhere; needs scripts/test.sh's npm packages)
# Knobs (environment): BENCH_FEEDBACK_RUNS=100
# stdout: the figures. stderr: cargo's build output.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BENCH_FEEDBACK_RUNS=${BENCH_FEEDBACK_RUNS:-100}
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty)'); release build" >&2
cargo test --release -p bosun-server --test api feedback::feedback_figures -- \
    --ignored --nocapture --test-threads 1 2>&1 |
    grep -oE '(feedback: [0-9]+ pull requests.*|^check-run calls.*|^comment calls.*|^token requests.*|^run end.*)' ||
    { echo "the figures test did not print its figures" >&2; exit 1; }
