#!/usr/bin/env bash
# Console benchmark: with N (default 10,000) stacks in the store, some runs and some state
# locks, the server time of each console page — p50/p99 of one request after another
# (wrk, one connection), so the figure is the server's own time plus loopback with no
# queueing — side by side with the JSON API call that serves the same data (the floor
# the page builds on), and the ratio. Goal: every page under 50 ms at 10,000 stacks.
#
# Usage: bench/console.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_STACKS=10000 BENCH_RUNS=40 BENCH_LOCKS=200
#                      BENCH_DURATION=5s BENCH_SEED_WORKERS=16 BENCH_GOAL_MS=50
#                      BENCH_BIN=path/to/bosun (skip the release build)
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

STACKS=${BENCH_STACKS:-10000}
RUNS=${BENCH_RUNS:-40}
LOCKS=${BENCH_LOCKS:-200}
DURATION=${BENCH_DURATION:-5s}
SEED_WORKERS=${BENCH_SEED_WORKERS:-16}
GOAL_MS=${BENCH_GOAL_MS:-50}
ORG=default

for tool in wrk curl git python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is required (Debian: apt-get install $tool)"
done

if [ -n "${BENCH_BIN:-}" ]; then
    # A binary already built (a quick check of this script; figures are for release builds).
    BIN=$BENCH_BIN
    GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    GIT_DIRTY=false
    if [ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null || true)" ]; then
        GIT_DIRTY=true
    fi
else
    build_bosun
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-console.XXXXXX")
install_cleanup
mkdir -p "$WORK/data"
log "starting server (data dir $WORK/data, one embedded runner)"
launch_server "$WORK" 1
TOKEN=$(tr -d '[:space:]' <"$TOKEN_FILE")
log "server pid $SERVER_PID listening on $BASE"

api() {
    local method=$1 path=$2
    shift 2
    curl -sS --fail-with-body -X "$method" -H "Authorization: Bearer $TOKEN" \
        -H 'Content-Type: application/json' "$BASE/api/v1$path" "$@"
}

# --- seed -------------------------------------------------------------------------------

log "seeding $STACKS stacks ($SEED_WORKERS workers)"
run_child python3 "$HERE/seed.py" --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
    --count "$STACKS" --workers "$SEED_WORKERS" >"$WORK/seed.json"

# Runs: a stack on a local repository with the no-op engine (bench/runs), RUNS runs of it,
# one after another, each ending after its plan.
log "running $RUNS runs on stack bench-live"
mkdir -p "$WORK/src"
printf 'output "hello" {\n  value = "bosun bench"\n}\n' >"$WORK/src/main.tf"
git -C "$WORK/src" init --quiet --initial-branch=main
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid add main.tf
git -C "$WORK/src" -c user.name=bench -c user.email=bench@bosun.invalid commit --quiet -m "bench module"
git clone --quiet --bare "$WORK/src" "$WORK/repo.git"
cp "$HERE/runs/noop-engine.sh" "$WORK/noop-engine.sh"
chmod +x "$WORK/noop-engine.sh"
api POST "/orgs/$ORG/stacks" -d "{\"id\":\"bench-live\",\"repository\":\"file://$WORK/repo.git\",\"engine\":\"terraform\",\"engine_binary\":\"$WORK/noop-engine.sh\"}" >/dev/null
for _ in $(seq "$RUNS"); do
    api POST "/orgs/$ORG/stacks/bench-live/runs" -d '{"kind":"tracked"}' >/dev/null
done
deadline=$((SECONDS + 300))
while :; do
    live=$(api GET "/orgs/$ORG/stacks/bench-live/runs?limit=500" |
        python3 -c 'import json,sys; r=json.load(sys.stdin)["items"]; print(sum(1 for x in r if x["state"] not in ("finished","failed","discarded","canceled","interrupted","force_failed","skipped")))')
    [ "$live" = 0 ] && break
    [ "$SECONDS" -lt "$deadline" ] || die "$live runs still going after 300s"
    sleep 0.5
done
RUN=$(api GET "/orgs/$ORG/stacks/bench-live/runs?limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["id"])')

# Locks: LOCKS seeded stacks' states locked (a laptop's terraform, through the state backend).
log "locking the state of $LOCKS stacks"
for i in $(seq 0 $((LOCKS - 1))); do
    s=$(printf 'stack-%05d' $((i * (STACKS / LOCKS))))
    api LOCK "/orgs/$ORG/stacks/$s/state" \
        -d "{\"ID\":\"bench-$i\",\"Operation\":\"OperationTypeApply\",\"Who\":\"bench@laptop\",\"Version\":\"1.0.3\",\"Created\":\"\",\"Path\":\"\",\"Info\":\"\"}" >/dev/null
done

# The cursor of the middle page (after half the stacks): the console pages with the API's
# own cursor.
MIDDLE=$(python3 - "$BASE" "$TOKEN" "$ORG" "$((STACKS / 2))" <<'PY'
import json, sys, urllib.request
base, token, org, skip = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cursor, seen = None, 0
while seen < skip:
    limit = min(1000, skip - seen)
    url = f"{base}/api/v1/orgs/{org}/stacks?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    page = json.load(urllib.request.urlopen(req))
    seen += len(page["items"])
    cursor = page["next_cursor"]
print(cursor)
PY
)
LOCKED=stack-00000

# --- log in once ------------------------------------------------------------------------

curl -sS -o /dev/null -c "$WORK/cookies" -X POST "$BASE/login" \
    --data-urlencode "token=$TOKEN" --data-urlencode "next=/"
COOKIE=$(awk '$6 == "bosun_session" { print $6 "=" $7 }' "$WORK/cookies")
[ -n "$COOKIE" ] || die "logging in gave no session cookie"

# --- measure ----------------------------------------------------------------------------

BUSY_BEFORE=$(busy_now)
if [ "$BUSY_BEFORE" -gt 10 ]; then
    log "warning: machine ${BUSY_BEFORE}% busy before measuring (other processes); figures will be noisy"
fi

# NAME, console page, the API call serving the same data, a text the page must contain.
TAB=$'\t'
PAGES="stacks (first page)${TAB}/orgs/$ORG/stacks${TAB}/api/v1/orgs/$ORG/stacks?limit=50${TAB}id=\"stacks\"
stacks (middle page)${TAB}/orgs/$ORG/stacks?after=$MIDDLE${TAB}/api/v1/orgs/$ORG/stacks?limit=50&cursor=$MIDDLE${TAB}id=\"stacks\"
stack (with $RUNS runs)${TAB}/orgs/$ORG/stacks/bench-live${TAB}/api/v1/orgs/$ORG/stacks/bench-live${TAB}id=\"runs\"
run${TAB}/orgs/$ORG/runs/$RUN${TAB}/api/v1/orgs/$ORG/runs/$RUN${TAB}id=\"run-state\"
state (locked)${TAB}/orgs/$ORG/stacks/$LOCKED/state${TAB}/api/v1/orgs/$ORG/stacks/$LOCKED/state/lock${TAB}id=\"lock-id\"
runners${TAB}/orgs/$ORG/runners${TAB}/api/v1/orgs/$ORG/runners${TAB}<h1
approvals${TAB}/orgs/$ORG/approvals${TAB}/api/v1/orgs/$ORG/approvals${TAB}<h1
drift${TAB}/orgs/$ORG/drift${TAB}/api/v1/orgs/$ORG/stacks?limit=50${TAB}<h1
audit${TAB}/orgs/$ORG/audit${TAB}/api/v1/orgs/$ORG/audit${TAB}<h1
audit by target (oldest)${TAB}/orgs/$ORG/audit?target=stack:stack-00000${TAB}/api/v1/orgs/$ORG/audit?target=stack:stack-00000${TAB}stack:stack-00000</a>
audit by action (scan)${TAB}/orgs/$ORG/audit?action=server${TAB}/api/v1/orgs/$ORG/audit?action=server${TAB}<h1"

printf '%s\n' "$PAGES" | run_child python3 "$HERE/console/measure.py" --url "$BASE" \
    --token "$TOKEN" --cookie "$COOKIE" --duration "$DURATION" --script "$HERE/report.lua" \
    >"$WORK/results.jsonl"

# --- report -----------------------------------------------------------------------------

python3 - "$WORK/results.jsonl" <<PY
import json, os, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
now = datetime.datetime.now(datetime.timezone.utc)
goal = $GOAL_MS
print()
print(f"Bosun console: {$STACKS} stacks, $RUNS runs, $LOCKS locks; wrk -t1 -c1 -d$DURATION per URL "
      f"(one request after another); {os.cpu_count()} CPUs, {now:%Y-%m-%d %H:%M} UTC")
print(f"build: commit $GIT_REV" + (" plus local changes" if "$GIT_DIRTY" == "true" else ""))
print()
hdr = f"{'page':<24}{'page p50':>10}{'p99':>8}{'API p50':>10}{'p99':>8}{'ratio':>8}{'KiB':>7}  goal"
print(hdr)
print("-" * len(hdr))
for r in rows:
    c, a = r["console"], r["api"]
    if c["p50_ms"] >= goal:
        ok = f"MISSES {goal} ms"
    elif c["p99_ms"] >= goal:
        ok = f"ok (p99 over {goal} ms)"
    else:
        ok = "ok"
    print(f"{r['page']:<24}{c['p50_ms']:>10.2f}{c['p99_ms']:>8.2f}{a['p50_ms']:>10.2f}{a['p99_ms']:>8.2f}"
          f"{str(r['ratio_p50']) + 'x':>8}{c['bytes'] / 1024:>7.1f}  {ok}")
print()
print("Times in ms. API: the JSON call serving the same data (drift: the stacks list's first page,")
print("which carries each stack's drift status). Machine busy before measuring: $BUSY_BEFORE%.")
print()
print(json.dumps({"bench": "console", "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "stacks": $STACKS, "runs": $RUNS, "locks": $LOCKS, "duration": "$DURATION",
                  "commit": "$GIT_REV", "dirty": "$GIT_DIRTY" == "true",
                  "goal_ms": goal, "pages": rows}, separators=(",", ":")))
PY
