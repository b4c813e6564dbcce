#!/usr/bin/env bash
# Listener benchmark: what the hardened listener (a watchdog per connection, the connection
# cap, TLS) costs a client, side by side in one run on one machine:
#
#   base   the server at BENCH_BASE (a git revision before the hardened listener: axum's
#          own serve loop, no timeouts, no cap), plain HTTP
#   plain  this revision, plain HTTP
#   tls    this revision, TLS 1.3 (an ECDSA P-256 certificate made with openssl for the run)
#
# Each gets the same wrk load on GET /healthz (no auth, no store) and on
# GET /api/v1/orgs/default/stacks/{random id} (BENCH_STACKS stacks seeded), with new
# connections kept alive as wrk does; p50/p99 and req/s are reported with the ratio to base.
#
# Usage: bench/listener.sh            (from anywhere)
# Knobs (environment): BENCH_BASE=<rev> (none: the base column is left out)
#                      BENCH_STACKS=1000 BENCH_CONNECTIONS=32 BENCH_THREADS=2
#                      BENCH_DURATION=10s
# stdout: the results table. stderr: progress and wrk's own reports.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

BASE_REV=${BENCH_BASE:-}
STACKS=${BENCH_STACKS:-1000}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-2}
DURATION=${BENCH_DURATION:-10s}

command -v wrk >/dev/null 2>&1 || {
    log "installing wrk (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null; }
}
command -v openssl >/dev/null 2>&1 || die "openssl is required (the run's certificate)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-listener.XXXXXX")
install_cleanup

# --- binaries ---------------------------------------------------------------------------

if [ -n "$BASE_REV" ]; then
    # A target dir of its own: cargo names a workspace crate's artifacts without its path,
    # so a worktree building into target/ would leave its crates where this revision's
    # look fresh.
    log "building the base revision $BASE_REV (in target/bench-base)"
    git -C "$ROOT" worktree add --detach "$WORK/base-src" "$BASE_REV" >&2
    (cd "$WORK/base-src" && CARGO_TARGET_DIR="$ROOT/target/bench-base" cargo build --release -p bosun) >&2
    cp "$ROOT/target/bench-base/release/bosun" "$WORK/bosun-base"
    git -C "$ROOT" worktree remove --force "$WORK/base-src"
fi
build_bosun
cp "$BIN" "$WORK/bosun-head"

# --- certificate ------------------------------------------------------------------------

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

# --- one variant ------------------------------------------------------------------------

# measure NAME BINARY [FLAG...]: seeds a fresh data dir, then loads /healthz and show.
measure() {
    local name=$1 bin=$2
    shift 2
    local dir="$WORK/$name"
    mkdir -p "$dir/data"
    BIN=$bin
    # Seeded over plain HTTP (seed.py speaks only that), then restarted with the flags.
    launch_server "$dir" 0
    python3 "$HERE/seed.py" --url "$BASE" --token-file "$TOKEN_FILE" --org default \
        --count "$STACKS" --workers 8 >/dev/null
    stop_server
    launch_server "$dir" 0 "$@"
    local token
    token=$(tr -d '[:space:]' <"$TOKEN_FILE")
    local busy
    busy=$(busy_now)
    [ "$busy" -le 10 ] || log "warning: machine ${busy}% busy before $name's load"
    log "$name: $BASE"
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$HERE/report.lua" "$BASE/healthz" \
        >"$WORK/wrk-$name-healthz.txt"
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H "Authorization: Bearer $token" \
        -s "$HERE/show.lua" "$BASE" -- "$STACKS" default >"$WORK/wrk-$name-show.txt"
    for load in healthz show; do
        grep -v '^BENCH_RESULT ' "$WORK/wrk-$name-$load.txt" | sed 's/^/    /' >&2
        grep '^BENCH_RESULT ' "$WORK/wrk-$name-$load.txt" | sed 's/^BENCH_RESULT //' \
            >"$WORK/result-$name-$load.json"
    done
    stop_server
}

VARIANTS=()
if [ -n "$BASE_REV" ]; then
    measure base "$WORK/bosun-base"
    VARIANTS+=(base)
fi
measure plain "$WORK/bosun-head"
measure tls "$WORK/bosun-head" --tls-cert-file "$WORK/cert.pem" --tls-key-file "$WORK/key.pem"
VARIANTS+=(plain tls)

# --- report -----------------------------------------------------------------------------

python3 - "$WORK" "$BASE_REV" "$GIT_REV" "$STACKS" "wrk -t$THREADS -c$CONNS -d$DURATION" "${VARIANTS[@]}" <<'PY'
import json, os, sys
work, base_rev, head_rev, stacks, load, *variants = sys.argv[1:]
def res(v, load):
    with open(os.path.join(work, f"result-{v}-{load}.json")) as f:
        r = json.load(f)
    errors = r["errors"]["status"] + r["errors"]["connect"] + r["errors"]["read"] \
        + r["errors"]["write"] + r["errors"]["timeout"]
    return {"p50": r["p50_us"] / 1000, "p99": r["p99_us"] / 1000,
            "rps": r["requests"] / (r["duration_us"] / 1e6), "errors": errors}
labels = {"base": f"base ({base_rev}, no limits)", "plain": f"this ({head_rev}), plain HTTP",
          "tls": f"this ({head_rev}), TLS"}
ref = variants[0]
print(f"Listener cost: {stacks} stacks, {load}, {os.cpu_count()} CPUs shared by wrk and the server")
print()
hdr = f"{'server':<36}{'endpoint':<10}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}{'req/s vs ' + ref:>16}{'errors':>8}"
print(hdr)
print("-" * len(hdr))
for load in ("healthz", "show"):
    r0 = res(ref, load)
    for v in variants:
        r = res(v, load)
        print(f"{labels[v]:<36}{load:<10}{r['p50']:>9.2f}{r['p99']:>9.2f}{r['rps']:>9.0f}"
              f"{r['rps'] / r0['rps']:>15.2f}x{r['errors']:>8}")
PY
