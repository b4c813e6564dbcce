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
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

STACKS=${BENCH_STACKS:-10000}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-2}
DURATION=${BENCH_DURATION:-15s}
SEED_WORKERS=${BENCH_SEED_WORKERS:-16}
ORG=default

# --- prerequisites ----------------------------------------------------------------------

ensure_wrk
command -v python3 >/dev/null 2>&1 || die "python3 is required (bench/seed.py and the report)"

build_bosun

# --- server lifecycle -------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench.XXXXXX")
install_cleanup

mkdir -p "$WORK/data"
log "starting server (data dir $WORK/data)"
launch_server "$WORK" 0
TOKEN=$(tr -d '[:space:]' <"$TOKEN_FILE")
log "server pid $SERVER_PID listening on $BASE"

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
BUSY_BEFORE=$(busy_now)
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
