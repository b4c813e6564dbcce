#!/usr/bin/env bash
# Stacks API benchmark: with N (default 10,000) stacks in the store, p50/p99 latency and
# throughput of list (first page, limit=100) and show (random id) under 32 concurrent
# clients, plus the server's resident memory idle and under that load. The same wrk load
# against /healthz (no auth, no store access) gives the HTTP floor of this very server on
# this machine; it is a floor, not a peer product.
#
# Usage: bench/stacks.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_STACKS=10000 BENCH_CONNECTIONS=32 BENCH_THREADS=2
#                      BENCH_DURATION=15s BENCH_SEED_WORKERS=16
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress, and wrk's own reports.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

STACKS=${BENCH_STACKS:-10000}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-2}
DURATION=${BENCH_DURATION:-15s}
SEED_WORKERS=${BENCH_SEED_WORKERS:-16}
ORG=default
STARTUP_TIMEOUT=60 # seconds to wait for the server's "listening on" line

log() { printf '==> %s\n' "$*" >&2; }
die() {
    printf 'stacks.sh: %s\n' "$*" >&2
    exit 1
}

# --- prerequisites ----------------------------------------------------------------------

ensure_wrk() {
    command -v wrk >/dev/null 2>&1 && return 0
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    log "wrk not found; installing it with apt-get"
    command -v apt-get >/dev/null 2>&1 || die "wrk is missing and apt-get is unavailable; install wrk"
    # Try from the current package lists first; refresh them only if that fails.
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        "${sudo[@]}" apt-get update -q >/dev/null
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null
    fi
    command -v wrk >/dev/null 2>&1 || die "wrk still not found after apt-get install"
}

ensure_wrk
command -v python3 >/dev/null 2>&1 || die "python3 is required (bench/seed.py and the report)"

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

# --- server lifecycle -------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench.XXXXXX")
SERVER_PID=
SAMPLER_PID=
CHILD_PID=

# Runs "$@" in the background and waits for it: bash defers traps while a foreground
# command runs, so this keeps Ctrl-C / TERM prompt during seeding and load.
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
        local deadline=$((SECONDS + 10))
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
    if [ -n "$SAMPLER_PID" ]; then
        kill "$SAMPLER_PID" 2>/dev/null || true
        wait "$SAMPLER_PID" 2>/dev/null || true
    fi
    stop_server
    if [ "$rc" -ne 0 ] && [ -s "$WORK/server.log" ]; then
        printf 'stacks.sh: failed (exit %s); last server log lines:\n' "$rc" >&2
        tail -n 20 "$WORK/server.log" >&2 || true
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK/data"
log "starting server (data dir $WORK/data)"
: >"$WORK/server.log"  # exists before the poll below reads it
"$BIN" server --listen 127.0.0.1:0 --data-dir "$WORK/data" --local-runners 0 >"$WORK/server.out" 2>"$WORK/server.log" &
SERVER_PID=$!

# Poll for the address line (printed once the socket is bound) and the admin token.
ADDR=
TOKEN_FILE="$WORK/data/admin-token"
deadline=$((SECONDS + STARTUP_TIMEOUT))
while :; do
    ADDR=$(sed -n 's|^bosun: listening on http://\(127\.0\.0\.1:[0-9][0-9]*\).*$|\1|p' "$WORK/server.log" | head -n 1)
    [ -n "$ADDR" ] && [ -s "$TOKEN_FILE" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "server exited during startup"
    [ "$SECONDS" -lt "$deadline" ] || die "server not ready within ${STARTUP_TIMEOUT}s"
    sleep 0.05
done
BASE="http://$ADDR"
TOKEN=$(tr -d '[:space:]' <"$TOKEN_FILE")
log "server pid $SERVER_PID listening on $BASE"

# --- resident memory ------------------------------------------------------------------

# Prints the server's VmRSS in KiB.
rss_kib() {
    local k v _
    while read -r k v _; do
        if [ "$k" = "VmRSS:" ]; then
            echo "$v"
            return 0
        fi
    done <"/proc/$SERVER_PID/status"
    die "no VmRSS for pid $SERVER_PID"
}

# Starts a background loop that keeps the peak VmRSS (KiB) seen so far in file $1,
# reading /proc every 100 ms. No forks per sample besides sleep.
start_sampler() {
    local out=$1
    rss_kib >"$out"
    (
        trap 'exit 0' TERM
        peak=$(<"$out")
        while :; do
            v=0
            while read -r k val _; do
                if [ "$k" = "VmRSS:" ]; then
                    v=$val
                    break
                fi
            done <"/proc/$SERVER_PID/status" || exit 0
            if [ "$v" -gt "$peak" ]; then
                peak=$v
                echo "$peak" >"$out"
            fi
            sleep 0.1
        done
    ) &
    SAMPLER_PID=$!
}

stop_sampler() {
    kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
    SAMPLER_PID=
}

# --- CPU accounting -------------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# Prints the server's CPU time so far (user + system), in clock ticks.
server_ticks() {
    local s
    s=$(<"/proc/$SERVER_PID/stat")
    s=${s##*) } # drop "pid (comm) "; fields now start at 3 (state)
    local f
    read -r -a f <<<"$s"
    echo $((f[11] + f[12])) # utime (field 14), stime (field 15)
}

# Prints "busy total" jiffies for the whole machine, from the first line of /proc/stat.
machine_ticks() {
    local _cpu user nice system idle iowait irq softirq steal _rest
    read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
    local busy=$((user + nice + system + irq + softirq + steal))
    echo "$busy $((busy + idle + iowait))"
}

RSS_EMPTY=$(rss_kib)

# --- seed -------------------------------------------------------------------------------

log "seeding $STACKS stacks ($SEED_WORKERS workers)"
run_child python3 "$HERE/seed.py" --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
    --count "$STACKS" --workers "$SEED_WORKERS" >"$WORK/seed.json"
RSS_IDLE=$(rss_kib)
log "idle RSS after seeding: $RSS_IDLE KiB"

# --- load -------------------------------------------------------------------------------

# The figures mean little if something else is using the CPUs: measure the machine's
# busy share over one second before the load phases (the server is idle now).
read -r b0 t0 < <(machine_ticks)
sleep 1
read -r b1 t1 < <(machine_ticks)
BUSY_BEFORE=$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
if [ "$BUSY_BEFORE" -gt 10 ]; then
    log "warning: machine ${BUSY_BEFORE}% busy before load (other processes); figures will be noisy"
fi

AUTH=(-H "Authorization: Bearer $TOKEN")

# run_load NAME URL SCRIPT [auth|noauth] [-- script args...]
run_load() {
    local name=$1 url=$2 script=$3 auth=$4
    shift 4
    local hdr=()
    [ "$auth" = auth ] && hdr=("${AUTH[@]}")
    log "$name: wrk -t$THREADS -c$CONNS -d$DURATION --latency $url"
    start_sampler "$WORK/rss-$name"
    local s0 s1 m0 m1
    s0=$(server_ticks)
    m0=$(machine_ticks)
    run_child wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "${hdr[@]}" -s "$script" "$url" "$@" \
        >"$WORK/wrk-$name.txt"
    s1=$(server_ticks)
    m1=$(machine_ticks)
    stop_sampler
    # server CPU ticks, machine busy ticks, machine total ticks (all CPUs) during the run
    echo "$((s1 - s0)) $((${m1% *} - ${m0% *})) $((${m1#* } - ${m0#* }))" >"$WORK/cpu-$name"
    grep -v '^BENCH_RESULT ' "$WORK/wrk-$name.txt" | sed 's/^/    /' >&2
    grep '^BENCH_RESULT ' "$WORK/wrk-$name.txt" | sed 's/^BENCH_RESULT //' >"$WORK/result-$name.json"
    [ -s "$WORK/result-$name.json" ] || die "$name: wrk printed no result line"
    python3 - "$name" "$WORK/result-$name.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
e = r["errors"]
if r["requests"] == 0:
    sys.exit(f"stacks.sh: {name}: no requests completed")
if e["status"]:
    sys.exit(f"stacks.sh: {name}: {e['status']} of {r['requests']} responses were not 2xx/3xx")
socket = e["connect"] + e["read"] + e["write"] + e["timeout"]
if socket:
    print(f"stacks.sh: warning: {name}: {socket} socket errors/timeouts: {e}", file=sys.stderr)
PY
}

run_load list "$BASE/api/v1/orgs/$ORG/stacks?limit=100" "$HERE/report.lua" auth
run_load show "$BASE" "$HERE/show.lua" auth -- "$STACKS" "$ORG"
run_load healthz "$BASE/healthz" "$HERE/report.lua" noauth
RSS_AFTER=$(rss_kib)

# --- report -----------------------------------------------------------------------------

python3 - "$WORK" <<PY
import json, os, sys, datetime
work = sys.argv[1]
def load(name):
    with open(os.path.join(work, f"result-{name}.json")) as f:
        r = json.load(f)
    secs = r["duration_us"] / 1e6
    return {
        "p50_ms": round(r["p50_us"] / 1000, 3),
        "p99_ms": round(r["p99_us"] / 1000, 3),
        "rps": round(r["requests"] / secs, 1),
        "requests": r["requests"],
        "avg_resp_bytes": round(r["bytes"] / r["requests"]),
    }
def cpu(name):
    # Cores' worth of CPU during the run: the server's own, and the whole machine's.
    with open(os.path.join(work, f"cpu-{name}")) as f:
        srv, busy, total = map(int, f.read().split())
    cpus = os.cpu_count()
    return {"server_cores": round(srv / total * cpus, 2) if total else None,
            "machine_busy_pct": round(busy * 100 / total) if total else None}
def peak(name):
    with open(os.path.join(work, f"rss-{name}")) as f:
        return int(f.read().strip())
mib = lambda kib: round(kib / 1024, 1)
res = {n: {**load(n), **cpu(n)} for n in ("list", "show", "healthz")}
floor = res["healthz"]["p50_ms"]
ratio = {n: round(res[n]["p50_ms"] / floor, 1) for n in ("list", "show")}
with open(os.path.join(work, "seed.json")) as f:
    seed = json.load(f)
rss = {
    "empty_store": mib($RSS_EMPTY),
    "idle_after_seed": mib($RSS_IDLE),
    "peak_list": mib(peak("list")),
    "peak_show": mib(peak("show")),
    "peak_under_load": mib(max(peak("list"), peak("show"))),
    "idle_after_load": mib($RSS_AFTER),
}
now = datetime.datetime.now(datetime.timezone.utc)
cpus = os.cpu_count()

print()
print(f"Bosun stacks API: {$STACKS} stacks, wrk -t$THREADS -c$CONNS -d$DURATION, "
      f"{cpus} CPUs (client and server share them), {now:%Y-%m-%d %H:%M} UTC")
print(f"build: commit $GIT_REV" + (" plus local changes" if "$GIT_DIRTY" == "true" else ""))
print()
hdr = (f"{'endpoint':<44}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>10}{'p50 / floor':>13}"
       f"{'server CPU':>12}")
print(hdr)
print("-" * len(hdr))
rows = [
    ("list", "GET /api/v1/orgs/$ORG/stacks?limit=100"),
    ("show", "GET /api/v1/orgs/$ORG/stacks/{random id}"),
    ("healthz", "GET /healthz  [HTTP floor, see note]"),
]
for key, label in rows:
    r = res[key]
    rel = f"{ratio[key]:.1f}x" if key in ratio else "1.0x"
    print(f"{label:<44}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['rps']:>10.0f}{rel:>13}"
          f"{r['server_cores']:>7.2f} cores")
print()
print("Floor: the same server under the same wrk load on /healthz (no auth, no store access).")
print("It is the HTTP stack's own cost on this machine, not a peer product.")
print(f"server CPU = the server process's CPU time / wall time; the rest of the {cpus} CPUs go to "
      f"wrk. Machine busy before load: $BUSY_BEFORE%.")
print()
print(f"{'server RSS (VmRSS)':<44}{'MiB':>9}")
print("-" * 53)
for key, label in [
    ("empty_store", "after start, empty store"),
    ("idle_after_seed", f"idle, after seeding {$STACKS} stacks"),
    ("peak_list", "peak under list load (100 ms samples)"),
    ("peak_show", "peak under show load (100 ms samples)"),
    ("idle_after_load", "idle, after all load"),
]:
    print(f"{label:<44}{rss[key]:>9.1f}")
print()
print(f"seeding: {seed['stacks']} creates in {seed['seconds']:.1f}s "
      f"({seed['stacks'] / seed['seconds']:.0f}/s, {seed['workers']} client threads); "
      f"list page ~{res['list']['avg_resp_bytes'] // 1024} KiB, show ~{res['show']['avg_resp_bytes']} B")
print()
out = {
    "bench": "stacks",
    "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    "stacks": $STACKS,
    "wrk": {"threads": $THREADS, "connections": $CONNS, "duration": "$DURATION"},
    "cpus": cpus,
    "commit": "$GIT_REV",
    "dirty": "$GIT_DIRTY" == "true",
    "machine_busy_before_load_pct": $BUSY_BEFORE,
    "list": res["list"],
    "show": res["show"],
    "healthz_floor": res["healthz"],
    "p50_vs_floor": ratio,
    "rss_mib": rss,
    "seed": seed,
}
print(json.dumps(out, separators=(",", ":")))
PY
