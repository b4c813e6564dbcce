#!/usr/bin/env bash
# Scale-out benchmark: runs per minute and dispatch latency p50/p99 with
#  1. one `bosun server` on SQLite (sqlite-1),
#  2. one server on PostgreSQL (pg-1),
#  3. two replicas on one PostgreSQL database (pg-2), the runners spread over both and the
#     runs created alternately through both,
# with the same runners (BENCH_RUNNERS embedded runners in all, split evenly between the
# replicas), the same no-op engine (bench/runs/noop-engine.sh) and the same workload:
#  - dispatch latency: run created (the server's `created_at`) → engine process started,
#    over BENCH_LATENCY_RUNS proposed runs created one at a time (runners idle);
#  - throughput: BENCH_SLOTS proposed runs outstanding (one stack each), runs finished in
#    a BENCH_DURATION s window after a BENCH_WARMUP s warm-up.
# PostgreSQL: BENCH_DATABASE_URL (a server where this role may CREATE DATABASE; each
# scenario gets a fresh database), else a throwaway server from scripts/postgres.sh.
#
# Usage: bench/scale.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_RUNNERS=4 BENCH_SLOTS=8 BENCH_LATENCY_RUNS=100
#                      BENCH_LATENCY_WARMUP=5 BENCH_DURATION=30 BENCH_WARMUP=5
#                      BENCH_SCENARIOS="sqlite-1 pg-1 pg-2" BENCH_DATABASE_URL=postgres://…
#                      BENCH_KEEP=1 (keep the work area: server logs, engine log, driver JSON)
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
STOP_TIMEOUT=15
KEEP_WORK=${BENCH_KEEP:-0}
KEEP_WHAT="server logs, engine log, driver JSON"

RUNNERS=${BENCH_RUNNERS:-4}
SLOTS=${BENCH_SLOTS:-8}
LATENCY_RUNS=${BENCH_LATENCY_RUNS:-100}
LATENCY_WARMUP=${BENCH_LATENCY_WARMUP:-5}
DURATION=${BENCH_DURATION:-30}
WARMUP=${BENCH_WARMUP:-5}
SCENARIOS=${BENCH_SCENARIOS:-sqlite-1 pg-1 pg-2}
ORG=default

for n in $RUNNERS $SLOTS $LATENCY_RUNS $LATENCY_WARMUP $DURATION $WARMUP; do
    case $n in '' | *[!0-9]*) die "not a whole number: '$n' (check the BENCH_* knobs)" ;; esac
done
for s in $SCENARIOS; do
    case $s in sqlite-1 | pg-[12]) ;; *) die "unknown scenario '$s' (sqlite-1, pg-1, pg-2)" ;; esac
done
[ "$RUNNERS" -ge 2 ] || die "BENCH_RUNNERS must be at least 2 (split over two replicas)"

command -v python3 >/dev/null 2>&1 || die "python3 is required (bench/scale/drive.py and the report)"
command -v git >/dev/null 2>&1 || die "git is required (the runners clone the stack's repository)"
command -v psql >/dev/null 2>&1 || die "psql is required (a fresh database per PostgreSQL scenario)"

build_bosun

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-scale.XXXXXX")

# --- PostgreSQL -------------------------------------------------------------------------

PG_ADMIN_URL=${BENCH_DATABASE_URL:-}
PG_STARTED=0
case " $SCENARIOS " in
*" pg-"*)
    open_postgres
    ;;
esac
PG_VERSION=${PG_VERSION:-}
DB_NAMES=()

# The replicas of the current scenario (parallel arrays) and every server pid so far.
R_PIDS=()
R_LOGS=()
R_URLS=()

stop_replicas() {
    local pid
    for pid in "${R_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    local deadline=$((SECONDS + STOP_TIMEOUT))
    for pid in "${R_PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    R_PIDS=()
}

scale_cleanup() {
    local rc=$?
    # Cleanup must run to its end whatever fails in it: the work area goes either way.
    set +e
    stop_replicas
    if [ -n "$PG_ADMIN_URL" ]; then
        local db
        for db in "${DB_NAMES[@]}"; do
            psql "$PG_ADMIN_URL" -X -q -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
        done
    fi
    if [ "$PG_STARTED" = 1 ]; then
        stop_test_postgres
    fi
    if [ "$rc" -ne 0 ] && [ "${#R_LOGS[@]}" -gt 0 ]; then
        local l
        for l in "${R_LOGS[@]}"; do
            printf '%s: last lines of %s:\n' "$BENCH_NAME" "$l" >&2
            tail -n 10 "$l" >&2 || true
        done
    fi
    (exit "$rc")
    cleanup
}
trap scale_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- work area: the repository and the engine -------------------------------------------

log "creating the stack repository"
mkdir -p "$WORK/src"
printf 'output "hello" {\n  value = "bosun bench"\n}\n' >"$WORK/src/main.tf"
git -C "$WORK/src" init --quiet --initial-branch=main
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid add main.tf
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid commit --quiet -m "bench module"
git clone --quiet --bare "$WORK/src" "$WORK/repo.git"
REPO="file://$WORK/repo.git"

# --- replicas ---------------------------------------------------------------------------

# start_replica SCENARIO NAME RUNNERS DATABASE_URL(or empty: SQLite) [SECRETS_KEY_FILE]
start_replica() {
    local scenario=$1 name=$2 runners=$3 db=$4 key=${5:-}
    local dir="$WORK/$scenario/$name"
    mkdir -p "$dir/data"
    local log_file="$dir/server.log"
    : >"$log_file"
    local args=(server --listen 127.0.0.1:0 --data-dir "$dir/data" --local-runners "$runners"
        --replica-id "$name" --git-poll-interval 0s)
    [ -n "$db" ] && args+=(--database-url "$db")
    [ -n "$key" ] && args+=(--secrets-key-file "$key")
    "$BIN" "${args[@]}" >"$dir/server.out" 2>"$log_file" &
    local pid=$!
    R_PIDS+=("$pid")
    R_LOGS+=("$log_file")
    local addr= deadline=$((SECONDS + STARTUP_TIMEOUT))
    while :; do
        addr=$(sed -n 's|^bosun: listening on http://\(127\.0\.0\.1:[0-9][0-9]*\).*$|\1|p' "$log_file" | head -n 1)
        [ -n "$addr" ] && [ "$(grep -c 'registered runner=' "$log_file" || true)" -ge "$runners" ] && break
        kill -0 "$pid" 2>/dev/null || die "$scenario/$name exited during startup"
        [ "$SECONDS" -lt "$deadline" ] || die "$scenario/$name not ready within ${STARTUP_TIMEOUT}s"
        sleep 0.05
    done
    R_URLS+=("http://$addr")
    log "$scenario: $name (pid $pid, $runners runner(s)) on http://$addr"
}

scenario() {
    local name=$1 backend=${1%-*} replicas=${1#*-}
    R_LOGS=()
    R_URLS=()
    local db=
    if [ "$backend" = pg ]; then
        local dbname="bosun_bench_scale_$$_${replicas}"
        psql "$PG_ADMIN_URL" -X -q -c "CREATE DATABASE $dbname" >/dev/null || die "cannot create database $dbname"
        DB_NAMES+=("$dbname")
        db="${PG_ADMIN_URL%/*}/$dbname"
    fi
    local per=$((RUNNERS / replicas))
    start_replica "$name" a "$((RUNNERS - per * (replicas - 1)))" "$db"
    if [ "$replicas" -eq 2 ]; then
        start_replica "$name" b "$per" "$db" "$WORK/$name/a/data/secrets.key"
    fi
    local token_file="$WORK/$name/a/data/admin-token"
    local urls=() u
    for u in "${R_URLS[@]}"; do urls+=(--url "$u"); done

    local busy
    busy=$(busy_now)
    echo "$busy" >"$WORK/busy-$name"
    [ "$busy" -le 10 ] || log "warning: machine ${busy}% busy before $name (other processes); figures will be noisy"

    # The engine's start log is per scenario: a fresh copy of the no-op engine each time.
    mkdir -p "$WORK/$name/engine"
    cp "$HERE/runs/noop-engine.sh" "$WORK/$name/engine/noop-engine.sh"
    chmod +x "$WORK/$name/engine/noop-engine.sh"
    local engine="$WORK/$name/engine/noop-engine.sh"

    log "$name: dispatch latency, $LATENCY_RUNS runs one at a time (+$LATENCY_WARMUP warm-up)"
    run_child python3 "$HERE/scale/drive.py" latency "${urls[@]}" --token-file "$token_file" \
        --org "$ORG" --repo "$REPO" --engine-binary "$engine" \
        --engine-log "$WORK/$name/engine/engine-starts.log" --stack lat \
        --runs "$LATENCY_RUNS" --warmup-runs "$LATENCY_WARMUP" >"$WORK/latency-$name.json"
    log "$name: throughput, $SLOTS runs outstanding, ${WARMUP}s warm-up + ${DURATION}s window"
    run_child python3 "$HERE/scale/drive.py" throughput "${urls[@]}" --token-file "$token_file" \
        --org "$ORG" --repo "$REPO" --engine-binary "$engine" --stack tp --slots "$SLOTS" \
        --seconds "$DURATION" --warmup "$WARMUP" >"$WORK/throughput-$name.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("    %s runs/min (%d runs in the window)" % (r["runs_per_minute"], r["runs_in_window"]))' \
        "$WORK/throughput-$name.json" >&2
    stop_replicas
    R_LOGS=()
}

NAMES=()
for s in $SCENARIOS; do
    scenario "$s"
    NAMES+=("$s")
done

python3 "$HERE/scale/report.py" "$WORK" "${NAMES[@]}" <<JSON
{"commit": "$GIT_REV", "dirty": $GIT_DIRTY, "postgres": "$PG_VERSION", "runners": $RUNNERS,
 "slots": $SLOTS, "latency_runs": $LATENCY_RUNS, "latency_warmup": $LATENCY_WARMUP,
 "duration": $DURATION, "warmup": $WARMUP}
JSON
