#!/usr/bin/env bash
# Store-size benchmark: what a request costs with 10,000 and with 100,000 stacks in org
# `default` (10 runs with their phases and log chunks, and 5 state versions, per stack;
# 1,000 registered runners; a few small orgs), on SQLite and on PostgreSQL. The store is
# seeded directly by bosun-store's `seed` example (Store API templates copied in bulk SQL,
# minutes instead of hours over HTTP), then the release server starts on it and wrk times
# every API read and console page — at saturation (BENCH_CONNECTIONS connections in a closed
# loop: p50/p99 and req/s), one request at a time (p99 without queueing) and at an offered
# rate (BENCH_RATE requests a second over up to the same connections: the p99 the targets
# are judged by) — creates per second, the
# server's memory, and the database's size on disk. The report puts the sizes side by
# side with the cost growth from the first size to the last, next to the target 1.0×.
# Dispatch: a run created on the seeded store → the waiting runner's lease answering it.
# Backend `pg2` is two replicas on one PostgreSQL database, the load split between them.
#
# Usage: bench/size.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_SIZES="10000 100000" BENCH_BACKENDS="sqlite pg"
#                      BENCH_RUNS_PER_STACK=10 BENCH_VERSIONS_PER_STACK=5 BENCH_RUNNERS=1000
#                      BENCH_SMALL_ORGS=3 BENCH_SMALL_ORG_STACKS=200 BENCH_TEMPLATES=100
#                      BENCH_CONNECTIONS=32 BENCH_THREADS=2 BENCH_DURATION=10s
#                      BENCH_LATENCY_DURATION=5s BENCH_RATE=200 BENCH_METRICS_RATE=2
#                      BENCH_PACED_DURATION=10s BENCH_CREATE_DURATION=30s BENCH_DISPATCH_RUNS=100
#                      BENCH_DATABASE_URL=postgres://… BENCH_KEEP=1
#
# stdout: a results table per backend, then one JSON line with the same figures.
# stderr: progress (the seeder's included).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
KEEP_WORK=${BENCH_KEEP:-0}
KEEP_WHAT="seed output, samples, server logs, wrk output"

SIZES=${BENCH_SIZES:-10000 100000}
BACKENDS=${BENCH_BACKENDS:-sqlite pg}
RUNS_PER_STACK=${BENCH_RUNS_PER_STACK:-10}
VERSIONS_PER_STACK=${BENCH_VERSIONS_PER_STACK:-5}
RUNNERS=${BENCH_RUNNERS:-1000}
SMALL_ORGS=${BENCH_SMALL_ORGS:-3}
SMALL_ORG_STACKS=${BENCH_SMALL_ORG_STACKS:-200}
TEMPLATES=${BENCH_TEMPLATES:-100}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-2}
DURATION=${BENCH_DURATION:-10s}
LATENCY_DURATION=${BENCH_LATENCY_DURATION:-5s}
RATE=${BENCH_RATE:-200}
METRICS_RATE=${BENCH_METRICS_RATE:-2}
PACED_DURATION=${BENCH_PACED_DURATION:-10s}
CREATE_DURATION=${BENCH_CREATE_DURATION:-30s}
DISPATCH_RUNS=${BENCH_DISPATCH_RUNS:-100}
ORG=default
# A request slower than wrk's default 2 s would be dropped from the percentiles as a
# socket timeout: a slow request must show as slow.
WRK_TIMEOUT=30s

for n in $SIZES $RUNS_PER_STACK $VERSIONS_PER_STACK $RUNNERS $SMALL_ORGS $SMALL_ORG_STACKS \
    $TEMPLATES $CONNS $THREADS $DISPATCH_RUNS $RATE $METRICS_RATE; do
    case $n in '' | *[!0-9]*) die "not a whole number: '$n' (check the BENCH_* knobs)" ;; esac
done
for s in $SIZES; do
    [ "$s" -ge 2 ] || die "a size must be at least 2 stacks (got $s)"
done
for b in $BACKENDS; do
    case $b in sqlite | pg | pg2) ;; *) die "unknown backend '$b' (sqlite, pg, pg2)" ;; esac
done
[ "$RUNNERS" -ge 1 ] || die "BENCH_RUNNERS must be at least 1"
[ "$RATE" -ge 1 ] && [ "$METRICS_RATE" -ge 1 ] || die "BENCH_RATE and BENCH_METRICS_RATE must be at least 1"

ensure_wrk
for tool in curl python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is required (Debian: apt-get install $tool)"
done
case " $BACKENDS " in
*" pg "* | *" pg2 "*) command -v psql >/dev/null 2>&1 || die "psql is required (a fresh database per size)" ;;
esac

build_bosun
log "building: cargo build --release -p bosun-store --example seed"
(cd "$ROOT" && cargo build --release -p bosun-store --example seed) >&2
SEED="$ROOT/target/release/examples/seed"
[ -x "$SEED" ] || die "no seeder at $SEED"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-size.XXXXXX")

# --- PostgreSQL -------------------------------------------------------------------------

PG_ADMIN_URL=${BENCH_DATABASE_URL:-}
PG_STARTED=0
PG_VERSION=
case " $BACKENDS " in
*" pg "* | *" pg2 "*)
    open_postgres
    ;;
esac
DB_NAMES=()

# The second replica of `pg2` (the first is lib.sh's SERVER_PID/BASE).
B_PID=
B_BASE=
B_SAMPLER_PID=

stop_replica_b() {
    if [ -n "$B_SAMPLER_PID" ]; then
        kill "$B_SAMPLER_PID" 2>/dev/null || true
        wait "$B_SAMPLER_PID" 2>/dev/null || true
        B_SAMPLER_PID=
    fi
    [ -n "$B_PID" ] || return 0
    kill -TERM "$B_PID" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$B_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.05
    done
    kill -KILL "$B_PID" 2>/dev/null || true
    wait "$B_PID" 2>/dev/null || true
    B_PID=
    B_BASE=
}

size_cleanup() {
    local rc=$?
    set +e
    stop_replica_b
    stop_server
    if [ -n "$PG_ADMIN_URL" ]; then
        local db
        for db in "${DB_NAMES[@]}"; do
            psql "$PG_ADMIN_URL" -X -q -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
        done
    fi
    if [ "$PG_STARTED" = 1 ]; then
        stop_test_postgres
    fi
    (exit "$rc")
    cleanup
}
trap size_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- one measurement --------------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# wait_quiet: waits (at most 120 s) until the server uses under 5 % of a CPU for a second —
# its first passes over the new store (the scheduler's drift and stale checks) done.
wait_quiet() {
    local deadline=$((SECONDS + 120)) s0 s1
    while [ "$SECONDS" -lt "$deadline" ]; do
        s0=$(server_ticks)
        sleep 1
        s1=$(server_ticks)
        [ $(((s1 - s0) * 100)) -lt $((CLK_TCK * 5)) ] && return 0
    done
    log "warning: the server was still busy after 120 s; measuring anyway"
}

# Both replicas' CPU time so far, in clock ticks.
all_ticks() {
    local a
    a=$(server_ticks)
    if [ -n "$B_PID" ]; then
        a=$((a + $(SERVER_PID=$B_PID server_ticks)))
    fi
    echo "$a"
}

# both_wrk OUT_A OUT_B CONNS WRK-ARGS… -- URL_A URL_B SCRIPT-ARGS…: the load split over the
# two replicas, a wrk on each with half the connections, at the same time.
both_wrk() {
    local out_a=$1 out_b=$2 conns=$3
    shift 3
    local wrk_args=()
    while [ "$1" != -- ]; do
        wrk_args+=("$1")
        shift
    done
    shift
    local url_a=$1 url_b=$2
    shift 2
    local half=$((conns / 2)) threads=$(((THREADS + 1) / 2))
    local b_args=("$@")
    # create.lua's ids get another prefix on replica b, so the two never collide.
    if [ "${b_args[1]:-}" = "$ORG" ]; then b_args+=(b); fi
    wrk -t"$threads" -c"$half" "${wrk_args[@]}" "$url_a" "$@" >"$out_a" &
    local a=$!
    wrk -t"$threads" -c"$((conns - half))" "${wrk_args[@]}" "$url_b" "${b_args[@]}" >"$out_b" &
    local b=$!
    trap 'kill "$a" "$b" 2>/dev/null; exit 143' TERM
    local rc=0
    wait "$a" || rc=$?
    wait "$b" || rc=$?
    return "$rc"
}

# Keeps replica b's peak VmRSS (KiB) in file $1, as start_sampler does for the first.
start_b_sampler() {
    local first=$SAMPLER_PID
    start_sampler "$1" "$B_PID"
    B_SAMPLER_PID=$SAMPLER_PID
    SAMPLER_PID=$first
}

# run_wrk DIR NAME CONNECTIONS DURATION TARGET [-H header]...: TARGET is a URL path, or
# @FILE for a random path of FILE per request, or CREATE (new stacks). With PACE_MS set,
# each connection waits a random PACE_MS on average before each request (paced.lua): the
# offered rate is CONNECTIONS × 1000 / PACE_MS requests a second. With a second
# replica and more than one connection, half the connections go to each. Writes
# DIR/NAME.json (report.lua's figures plus server CPU) and keeps the peak RSS (of either
# replica) in DIR/rss-peak.
run_wrk() {
    local dir=$1 name=$2 conns=$3 duration=$4 target=$5
    shift 5
    local threads=$THREADS
    [ "$conns" -lt "$threads" ] && threads=$conns
    local script=$HERE/report.lua path=$target args=()
    if [ -n "${PACE_MS:-}" ]; then
        script=$HERE/size/paced.lua
        args=(-- "$PACE_MS")
        if [ "${target#@}" != "$target" ]; then
            path=
            args+=("${target#@}")
        fi
    elif [ "${target#@}" != "$target" ]; then
        script=$HERE/size/paths.lua
        path=
        args=(-- "${target#@}")
    elif [ "$target" = CREATE ]; then
        script=$HERE/size/create.lua
        path=
        args=(-- "$ORG")
    fi
    start_sampler "$dir/rss-$name"
    local split=0
    if [ -n "$B_PID" ] && [ "$conns" -gt 1 ]; then
        split=1
        start_b_sampler "$dir/rss-$name-b"
    fi
    local s0 s1 m0 m1
    s0=$(all_ticks)
    m0=$(machine_ticks)
    if [ "$split" = 1 ]; then
        run_child both_wrk "$dir/wrk-$name.txt" "$dir/wrk-$name-b.txt" "$conns" \
            -d"$duration" --timeout "$WRK_TIMEOUT" --latency "$@" -s "$script" -- "$BASE$path" \
            "$B_BASE$path" "${args[@]}"
    else
        run_child wrk -t"$threads" -c"$conns" -d"$duration" --timeout "$WRK_TIMEOUT" --latency "$@" \
            -s "$script" "$BASE$path" "${args[@]}" >"$dir/wrk-$name.txt"
    fi
    s1=$(all_ticks)
    m1=$(machine_ticks)
    stop_sampler
    local peak
    peak=$(<"$dir/rss-$name")
    local raws=("$dir/$name.raw")
    if [ "$split" = 1 ]; then
        kill "$B_SAMPLER_PID" 2>/dev/null || true
        wait "$B_SAMPLER_PID" 2>/dev/null || true
        B_SAMPLER_PID=
        if [ "$(<"$dir/rss-$name-b")" -gt "$peak" ]; then peak=$(<"$dir/rss-$name-b"); fi
        raws+=("$dir/$name-b.raw")
    fi
    if [ "$peak" -gt "$(<"$dir/rss-peak")" ]; then echo "$peak" >"$dir/rss-peak"; fi
    local raw txt
    for raw in "${raws[@]}"; do
        txt=${raw##*/}
        txt=$dir/wrk-${txt%.raw}.txt
        grep '^BENCH_RESULT ' "$txt" | sed 's/^BENCH_RESULT //' >"$raw"
        [ -s "$raw" ] || {
            cat "$txt" >&2
            die "$name: wrk printed no result line"
        }
    done
    python3 - "$name" "$dir/$name.json" "$((s1 - s0))" "$((${m1#* } - ${m0#* }))" "${PACE_MS:-}" "${raws[@]}" <<'PY'
import json, os, sys
name, out, srv, total, paced, raws = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                      sys.argv[5], sys.argv[6:])
parts = [json.load(open(p)) for p in raws]
# Two replicas' wrk runs as one: counts add up, p50 is the requests-weighted mean of the
# two, p99 and max the larger.
r = parts[0]
if len(parts) > 1:
    n = sum(p["requests"] for p in parts)
    r = {
        "requests": n,
        "duration_us": max(p["duration_us"] for p in parts),
        "bytes": sum(p["bytes"] for p in parts),
        "p50_us": sum(p["p50_us"] * p["requests"] for p in parts) / max(n, 1),
        "p99_us": max(p["p99_us"] for p in parts),
        "max_us": max(p["max_us"] for p in parts),
        "errors": {k: sum(p["errors"][k] for p in parts) for k in parts[0]["errors"]},
    }
e = r["errors"]
if r["requests"] == 0 and paced:
    # A low rate over a short BENCH_PACED_DURATION may offer nothing: no figure, not a failure.
    print(f"size.sh: warning: {name}: no request was offered at this rate in this time", file=sys.stderr)
    json.dump({"p50_ms": None, "p99_ms": None, "max_ms": None, "rps": 0, "requests": 0}, open(out, "w"))
    sys.exit(0)
if r["requests"] == 0:
    sys.exit(f"size.sh: {name}: no requests completed")
if e["status"]:
    sys.exit(f"size.sh: {name}: {e['status']} of {r['requests']} responses were not 2xx/3xx")
socket = e["connect"] + e["read"] + e["write"] + e["timeout"]
if socket:
    print(f"size.sh: warning: {name}: {socket} socket errors/timeouts: {e}", file=sys.stderr)
secs = r["duration_us"] / 1e6
json.dump({
    "p50_ms": round(r["p50_us"] / 1000, 3), "p99_ms": round(r["p99_us"] / 1000, 3),
    "max_ms": round(r["max_us"] / 1000, 3), "rps": round(r["requests"] / secs, 1),
    "requests": r["requests"], "avg_bytes": round(r["bytes"] / r["requests"]),
    "server_cores": round(srv / total * os.cpu_count(), 2) if total else None,
    "replicas": len(parts),
}, open(out, "w"))
PY
}

# check_once BASE PATH HEADER MARKER: one request must answer 200 with MARKER in the body
# (so a redirect to /login, an error page or an empty list is never what gets timed).
check_once() {
    local base=$1 path=$2 header=$3 marker=$4 code
    code=$(curl -sS -o "$WORK/check.body" -w '%{http_code}' -H "$header" "$base$path") ||
        die "GET $path failed"
    [ "$code" = 200 ] || die "GET $path answered $code: $(head -c 300 "$WORK/check.body")"
    grep -qF -- "$marker" "$WORK/check.body" || die "GET $path: no '$marker' in the answer"
}

# start_replica_b DIR DATABASE_URL: the second replica of `pg2`, on the same database with
# the first one's secrets key (so the console session works on both); sets B_PID, B_BASE.
start_replica_b() {
    local dir=$1/b url=$2
    mkdir -p "$dir/data"
    : >"$dir/server.log"
    "$BIN" server --listen 127.0.0.1:0 --data-dir "$dir/data" --local-runners 0 --database-url "$url" \
        --replica-id b --secrets-key-file "$1/data/secrets.key" --log-compress-after 0s \
        >"$dir/server.out" 2>"$dir/server.log" &
    B_PID=$!
    local addr='' deadline=$((SECONDS + STARTUP_TIMEOUT))
    while :; do
        addr=$(sed -n 's|^bosun: listening on \(http://127\.0\.0\.1:[0-9][0-9]*\).*$|\1|p' "$dir/server.log" | head -n 1)
        [ -n "$addr" ] && break
        kill -0 "$B_PID" 2>/dev/null || die "replica b exited during startup: $(tail -n 5 "$dir/server.log")"
        [ "$SECONDS" -lt "$deadline" ] || die "replica b not ready within ${STARTUP_TIMEOUT}s"
        sleep 0.05
    done
    B_BASE=$addr
}

# --- one size on one backend ------------------------------------------------------------

scenario() {
    local backend=$1 size=$2
    local dir=$WORK/$backend-$size
    mkdir -p "$dir/data"
    local db_args=() db_url='' dbname="bosun_bench_size_$$_${backend}_${size}"
    if [ "$backend" != sqlite ]; then
        psql "$PG_ADMIN_URL" -X -q -c "CREATE DATABASE $dbname" >/dev/null || die "cannot create database $dbname"
        DB_NAMES+=("$dbname")
        db_url="${PG_ADMIN_URL%/*}/$dbname"
        db_args=(--postgres "$db_url")
    else
        db_args=(--sqlite "$dir/data/bosun.db")
    fi

    log "$backend, $size stacks: seeding"
    local t0=$SECONDS
    run_child "$SEED" "${db_args[@]}" --token-file "$dir/data/admin-token" --stacks "$size" \
        --runs-per-stack "$RUNS_PER_STACK" --versions-per-stack "$VERSIONS_PER_STACK" \
        --runners "$RUNNERS" --small-orgs "$SMALL_ORGS" --small-org-stacks "$SMALL_ORG_STACKS" \
        --templates "$TEMPLATES" --samples-file "$dir/samples" >"$dir/seed.json"
    log "$backend, $size stacks: seeded in $((SECONDS - t0)) s"
    # The seeded files reach the disk now, not under the first measurements.
    sync

    local db_bytes
    if [ "$backend" != sqlite ]; then
        db_bytes=$(psql "$db_url" -X -q -t -A -c 'SELECT pg_database_size(current_database())')
    else
        db_bytes=$(($(stat -c %s "$dir/data/bosun.db") + $(stat -c %s "$dir/data/bosun.db-wal" 2>/dev/null || echo 0)))
    fi

    # Request paths from the seeder's sample of ids.
    python3 - "$dir/samples" "$dir" "$ORG" <<'PY'
import os, sys
samples, out, org = sys.argv[1], sys.argv[2], sys.argv[3]
stacks, runs, versions = [], [], []
for line in open(samples):
    f = line.split()
    if f and f[0] == "stack":
        stacks.append(f[1])
    elif f and f[0] == "run":
        runs.append(f[1])
    elif f and f[0] == "version":
        versions.append((f[1], f[2]))
api = f"/api/v1/orgs/{org}"
files = {
    "api-stack": [f"{api}/stacks/{s}" for s in stacks],
    "api-stack-runs": [f"{api}/stacks/{s}/runs" for s in stacks],
    "api-run": [f"{api}/runs/{r}" for r in runs],
    "api-versions": [f"{api}/stacks/{s}/state/versions" for s in stacks],
    "api-version": [f"{api}/stacks/{s}/state/versions/{v}" for s, v in versions],
    "page-stack": [f"/orgs/{org}/stacks/{s}" for s in stacks],
    "page-run": [f"/orgs/{org}/runs/{r}" for r in runs],
    "page-state": [f"/orgs/{org}/stacks/{s}/state" for s in stacks],
}
for name, paths in files.items():
    if not paths:
        sys.exit(f"size.sh: the seeder's sample has nothing for {name}")
    with open(os.path.join(out, f"{name}.paths"), "w") as f:
        f.write("\n".join(paths) + "\n")
PY
    local width middle
    width=$(python3 -c 'import json,sys; print(max(6, len(str(max(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])) - 1))))' \
        "$size" "$SMALL_ORG_STACKS" "$TEMPLATES")
    middle=$(printf "stack-%0${width}d" $((size / 2 - 1)))

    log "$backend, $size stacks: starting the server"
    # The seeded runs all ended long ago: left alone, the first retention pass would pack
    # every seeded log under the measurement. Requests are measured on a store at rest.
    local flags=(--log-compress-after 0s)
    [ -n "$db_url" ] && flags+=(--database-url "$db_url")
    if [ "$backend" = pg2 ]; then flags+=(--replica-id a); fi
    launch_server "$dir" 0 "${flags[@]}"
    if [ "$backend" = pg2 ]; then
        start_replica_b "$dir" "$db_url"
        log "$backend, $size stacks: replicas on $BASE and $B_BASE"
    fi
    local token
    token=$(tr -d '[:space:]' <"$TOKEN_FILE")
    local rss_start
    rss_start=$(rss_kib)
    wait_quiet
    local rss_idle
    rss_idle=$(rss_kib)
    echo "$rss_idle" >"$dir/rss-peak"

    curl -sS -o /dev/null -c "$dir/cookies" -X POST "$BASE/login" \
        --data-urlencode "token=$token" --data-urlencode "next=/"
    local cookie
    cookie=$(awk '$6 == "bosun_session" { print $6 "=" $7 }' "$dir/cookies")
    [ -n "$cookie" ] || die "logging in gave no session cookie"
    local auth="Authorization: Bearer $token" session="Cookie: $cookie"

    # NAME, target (a path, or @file of paths), header, a text the answer must contain.
    local api=/api/v1/orgs/$ORG tab=$'\t'
    local endpoints="api-list${tab}$api/stacks?limit=100${tab}$auth${tab}\"next_cursor\"
api-list-deep${tab}$api/stacks?limit=100&cursor=$middle${tab}$auth${tab}\"next_cursor\"
api-stack${tab}@$dir/api-stack.paths${tab}$auth${tab}\"repository\"
api-stack-runs${tab}@$dir/api-stack-runs.paths${tab}$auth${tab}\"items\"
api-run${tab}@$dir/api-run.paths${tab}$auth${tab}\"phases\"
api-versions${tab}@$dir/api-versions.paths${tab}$auth${tab}\"items\"
api-version${tab}@$dir/api-version.paths${tab}$auth${tab}\"checksum\"
api-runners${tab}$api/runners${tab}$auth${tab}\"items\"
api-approvals${tab}$api/approvals?limit=100${tab}$auth${tab}\"items\"
metrics${tab}/metrics${tab}X-Bench: size${tab}bosun_runs
page-stacks${tab}/orgs/$ORG/stacks${tab}$session${tab}id=\"stacks\"
page-stacks-deep${tab}/orgs/$ORG/stacks?after=$middle${tab}$session${tab}id=\"stacks\"
page-stack${tab}@$dir/page-stack.paths${tab}$session${tab}id=\"runs\"
page-run${tab}@$dir/page-run.paths${tab}$session${tab}id=\"run-state\"
page-state${tab}@$dir/page-state.paths${tab}$session${tab}<h1
page-drift${tab}/orgs/$ORG/drift${tab}$session${tab}<h1
page-approvals${tab}/orgs/$ORG/approvals${tab}$session${tab}<h1
page-runners${tab}/orgs/$ORG/runners${tab}$session${tab}<h1
page-audit${tab}/orgs/$ORG/audit${tab}$session${tab}<h1
healthz${tab}/healthz${tab}X-Bench: size${tab}ok"

    local name target header marker first
    while IFS=$tab read -r name target header marker; do
        first=$target
        [ "${target#@}" != "$target" ] && first=$(head -n 1 "${target#@}")
        check_once "$BASE" "$first" "$header" "$marker"
        if [ -n "$B_BASE" ]; then check_once "$B_BASE" "$first" "$header" "$marker"; fi
    done <<<"$endpoints"

    local busy
    busy=$(busy_now)
    [ "$busy" -le 10 ] || log "warning: machine ${busy}% busy before measuring (other processes); figures will be noisy"
    local rate paced_conns
    while IFS=$tab read -r name target header marker; do
        rate=$RATE
        # Prometheus scrapes every 15–60 s: even a few scrapers are far below RATE.
        [ "$name" = metrics ] && rate=$METRICS_RATE
        log "$backend, $size stacks: $name (wrk -c$CONNS -d$DURATION, -c1 -d$LATENCY_DURATION, $rate/s -d$PACED_DURATION)"
        run_wrk "$dir" "$name" "$CONNS" "$DURATION" "$target" -H "$header"
        if [ "$LATENCY_DURATION" != 0 ]; then
            run_wrk "$dir" "$name-1c" 1 "$LATENCY_DURATION" "$target" -H "$header"
        fi
        if [ "$PACED_DURATION" != 0 ]; then
            # At most one connection per request a second, so no connection waits long
            # enough between requests for the listener to close it as idle.
            paced_conns=$CONNS
            [ "$rate" -lt "$paced_conns" ] && paced_conns=$rate
            PACE_MS=$((paced_conns * 1000 / rate)) run_wrk "$dir" "$name-paced" "$paced_conns" "$PACED_DURATION" "$target" -H "$header"
        fi
    done <<<"$endpoints"
    local rss_load
    rss_load=$(<"$dir/rss-peak")

    # Dispatch: a runner of a pool of its own waits in its long poll; each run of its probe
    # stack is created (with two replicas, alternately on each) and timed until the lease
    # answers with it.
    log "$backend, $size stacks: dispatch ($DISPATCH_RUNS runs one at a time)"
    local creates=(--create-url "$BASE")
    if [ -n "$B_BASE" ]; then creates+=(--create-url "$B_BASE"); fi
    run_child python3 "$HERE/size/dispatch.py" --url "$BASE" "${creates[@]}" --token-file "$TOKEN_FILE" \
        --org "$ORG" --runs "$DISPATCH_RUNS" >"$dir/dispatch.json"

    # Creates last: they add stacks (ids `load-…`, listed before the seeded `stack-…`).
    log "$backend, $size stacks: creates (wrk -c$CONNS -d$CREATE_DURATION)"
    run_wrk "$dir" create "$CONNS" "$CREATE_DURATION" CREATE -H "$auth"
    local created
    created=$(curl -sS -H "$auth" "$BASE$api/stacks?limit=1000" |
        python3 -c 'import json,sys; print(sum(1 for s in json.load(sys.stdin)["items"] if s["id"].startswith("load-")))')
    [ "$created" -gt 0 ] || die "creates: no load-… stack listed afterwards"
    local rss_after
    rss_after=$(rss_kib)
    if [ -n "$B_PID" ]; then
        local rss_b
        rss_b=$(SERVER_PID=$B_PID rss_kib)
        if [ "$rss_b" -gt "$rss_after" ]; then rss_after=$rss_b; fi
    fi
    stop_replica_b
    stop_server

    local db_bytes_after
    if [ "$backend" != sqlite ]; then
        db_bytes_after=$(psql "$db_url" -X -q -t -A -c 'SELECT pg_database_size(current_database())')
    else
        db_bytes_after=$(($(stat -c %s "$dir/data/bosun.db") + $(stat -c %s "$dir/data/bosun.db-wal" 2>/dev/null || echo 0)))
    fi
    # The next size needs the disk more than this one's data does (100,000 stacks take
    # several GiB); BENCH_KEEP=1 keeps it.
    if [ "$KEEP_WORK" != 1 ]; then
        rm -rf "$dir/data"
        if [ "$backend" != sqlite ]; then
            psql "$PG_ADMIN_URL" -X -q -c "DROP DATABASE IF EXISTS $dbname WITH (FORCE)" >/dev/null
        fi
    fi
    cat >"$dir/scenario.json" <<JSON
{"backend": "$backend", "stacks": $size, "busy_before_pct": $busy,
 "rss_kib": {"start": $rss_start, "idle": $rss_idle, "peak_load": $rss_load, "after_creates": $rss_after},
 "db_bytes": {"seeded": $db_bytes, "after": $db_bytes_after}, "deep_cursor": "$middle"}
JSON
}

NAMES=()
for b in $BACKENDS; do
    for s in $SIZES; do
        scenario "$b" "$s"
        NAMES+=("$b-$s")
    done
done

python3 "$HERE/size/report.py" "$WORK" "${NAMES[@]}" <<JSON
{"commit": "$GIT_REV", "dirty": $GIT_DIRTY, "postgres": "$PG_VERSION", "connections": $CONNS,
 "threads": $THREADS, "duration": "$DURATION", "latency_duration": "$LATENCY_DURATION",
 "rate": $RATE, "metrics_rate": $METRICS_RATE, "paced_duration": "$PACED_DURATION",
 "create_duration": "$CREATE_DURATION", "runs_per_stack": $RUNS_PER_STACK,
 "versions_per_stack": $VERSIONS_PER_STACK, "runners": $RUNNERS, "small_orgs": $SMALL_ORGS,
 "small_org_stacks": $SMALL_ORG_STACKS, "templates": $TEMPLATES}
JSON
