#!/usr/bin/env bash
# VCS benchmark: route one push touching 1,000 files against 5,000 stacks in one repository.
#  1. Routing alone, in process (crates/bosun-core/examples/route_bench.rs): time per routing
#     decision (one push against all 5,000 stacks), median and p99, for Bosun's `vcs::route`
#     (a prefix trie of the watch paths) and, side by side, the naive peer (every changed
#     file against every stack's watch paths with `path_matches`, what a per-project
#     `when_modified` filter in the style of Atlantis costs); the ratio of the two.
#  2. End to end, the same layout through the real server: a monorepo with 5,000 stack
#     folders served over git's dumb HTTP protocol (python3 -m http.server), `bosun server`
#     with a webhook secret and `--github-url` pointing at it (no GitHub App: the mirror
#     fetches anonymously), the 5,000 stacks created through the API, then signed
#     `POST /webhooks/github` push deliveries one at a time, each for a new commit of 1,000
#     changed files: p50/p99 latency of the whole request (signature, mirror fetch and
#     diff, routing, one transaction recording 5,000 decisions and the runs), the first
#     (cold: the mirror is cloned) reported apart, with the git floor (the mirror's git
#     commands run directly) after each; then a breakdown on the grown store: rounds of a
#     push, a tag push (decisions recorded, no git, no routing), a redelivery, a pull
#     request closed and a ping; plus the share of a push spent routing, from step 1.
#
# Usage: bench/vcs.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_STACKS=5000 BENCH_FILES=1000 BENCH_ITERATIONS=200
#                      BENCH_WARMUP=20 (in-process iterations) BENCH_PUSHES=101 (push
#                      deliveries of phase 1, the first cold) BENCH_BREAKDOWN_ROUNDS=10
#                      (phase 2 rounds: push, tag push, redelivery, PR closed, ping)
#                      BENCH_SEED_WORKERS=16
#                      BENCH_KEEP=1 (keep the work area: server and HTTP logs, the repos)
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
KEEP_WORK=${BENCH_KEEP:-0}
KEEP_WHAT="server and HTTP logs, the repositories, driver JSON"

STACKS=${BENCH_STACKS:-5000}
FILES=${BENCH_FILES:-1000}
ITERATIONS=${BENCH_ITERATIONS:-200}
WARMUP=${BENCH_WARMUP:-20}
PUSHES=${BENCH_PUSHES:-101}
BREAKDOWN=${BENCH_BREAKDOWN_ROUNDS:-10}
SEED_WORKERS=${BENCH_SEED_WORKERS:-16}
ORG=default

for n in $STACKS $FILES $ITERATIONS $WARMUP $PUSHES $BREAKDOWN $SEED_WORKERS; do
    case $n in '' | *[!0-9]*) die "not a whole number: '$n' (check the BENCH_* knobs)" ;; esac
done
[ "$PUSHES" -ge 2 ] || die "BENCH_PUSHES must be at least 2 (one cold delivery, then warm ones)"

# --- prerequisites ----------------------------------------------------------------------

command -v python3 >/dev/null 2>&1 || die "python3 is required (bench/vcs/drive.py, the HTTP remote)"
command -v git >/dev/null 2>&1 || die "git is required (the repository; the server's mirror)"
[ -r /proc/stat ] || die "Linux /proc is required (CPU and memory readings)"

build_bosun
log "building: cargo build --release -p bosun-core --example route_bench"
(cd "$ROOT" && cargo build --release -p bosun-core --example route_bench) >&2
ROUTE_BENCH="$ROOT/target/release/examples/route_bench"
[ -x "$ROUTE_BENCH" ] || die "no binary at $ROUTE_BENCH"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-vcs.XXXXXX")
HTTP_PID=
# lib.sh's cleanup stops the server and removes WORK; the HTTP remote is ours to stop.
vcs_cleanup() {
    local rc=$?
    set +e
    if [ -n "$HTTP_PID" ]; then
        kill "$HTTP_PID" 2>/dev/null
        wait "$HTTP_PID" 2>/dev/null
    fi
    (exit "$rc")
    cleanup
}
install_cleanup
trap vcs_cleanup EXIT

# --- 1. routing alone -------------------------------------------------------------------

BUSY_ROUTE=$(busy_now)
log "routing alone: $STACKS stacks, pushes of $FILES files, $ITERATIONS iterations (+$WARMUP warm-up)"
run_child "$ROUTE_BENCH" --stacks "$STACKS" --files "$FILES" --iterations "$ITERATIONS" \
    --warmup "$WARMUP" --write-layout "$WORK/layout" >"$WORK/route.out"
sed '$d' "$WORK/route.out" | sed 's/^/    /' >&2
tail -n 1 "$WORK/route.out" >"$WORK/route.json"

# --- 2. the monorepo: base commit, then one commit per push ----------------------------

COMMITS=$((PUSHES + BREAKDOWN))
log "creating the monorepo: $STACKS stack folders, then $COMMITS commits of $FILES changed files"
SRC="$WORK/src.git"
python3 "$HERE/vcs/drive.py" repo "$WORK/layout" "$SRC" --pushes "$COMMITS" --commits "$WORK/commits.txt"

# The remote: a bare repository whose main starts at the base commit; the driver moves it
# one commit before each push delivery. Served by git's dumb HTTP protocol (static files
# kept current by update-server-info), anonymous, like a public repository.
REMOTE="$WORK/srv/acme/mono.git"
mkdir -p "$WORK/srv/acme"
git init --quiet --bare --initial-branch=main "$REMOTE"
git -C "$SRC" push --quiet "$REMOTE" "$(head -n 1 "$WORK/commits.txt"):refs/heads/main"
git -C "$REMOTE" update-server-info

: >"$WORK/http.out"
python3 -u -m http.server --bind 127.0.0.1 --directory "$WORK/srv" 0 >"$WORK/http.out" 2>"$WORK/http.log" &
HTTP_PID=$!
HTTP_PORT=
deadline=$((SECONDS + STARTUP_TIMEOUT))
while [ -z "$HTTP_PORT" ]; do
    HTTP_PORT=$(sed -n 's/^Serving HTTP on .* port \([0-9][0-9]*\).*$/\1/p' "$WORK/http.out" | head -n 1)
    kill -0 "$HTTP_PID" 2>/dev/null || die "the HTTP remote exited during startup"
    [ "$SECONDS" -lt "$deadline" ] || die "the HTTP remote not ready within ${STARTUP_TIMEOUT}s"
    [ -n "$HTTP_PORT" ] || sleep 0.05
done
GITHUB_URL="http://127.0.0.1:$HTTP_PORT"
CLONE_URL="$GITHUB_URL/acme/mono.git"
git ls-remote "$CLONE_URL" >/dev/null || die "cannot list $CLONE_URL"
log "    remote: $CLONE_URL (python3 -m http.server, pid $HTTP_PID)"

# --- 3. the server and its stacks ------------------------------------------------------

SECRET_FILE="$WORK/webhook-secret"
(umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$SECRET_FILE")
# The server's --github-webhook-secret, --github-url and --git-poll-interval, through their
# environment variables (keeps the secret out of the process list). No GitHub App.
BOSUN_GITHUB_WEBHOOK_SECRET=$(<"$SECRET_FILE")
export BOSUN_GITHUB_WEBHOOK_SECRET
export BOSUN_GITHUB_URL="$GITHUB_URL"
export BOSUN_GIT_POLL_INTERVAL=0s
unset BOSUN_GITHUB_APP_ID BOSUN_GITHUB_APP_KEY_FILE

mkdir -p "$WORK/server/data"
log "starting server: --local-runners 0 --git-poll-interval 0s --github-url $GITHUB_URL"
launch_server "$WORK/server" 0
log "    server pid $SERVER_PID listening on $BASE"

log "creating $STACKS stacks through the API ($SEED_WORKERS threads)"
run_child python3 "$HERE/vcs/drive.py" seed --url "$BASE" --token-file "$TOKEN_FILE" \
    --org "$ORG" --layout "$WORK/layout" --workers "$SEED_WORKERS" >"$WORK/seed.json"

RSS_SEEDED=$(rss_kib)
python3 "$HERE/vcs/drive.py" store "$WORK/server/data/bosun.db" >"$WORK/store-before.json"
BUSY=$(busy_now)
if [ "$BUSY" -gt 10 ]; then
    log "warning: machine ${BUSY}% busy before the deliveries (other processes); figures will be noisy"
fi

# --- 4. the deliveries -----------------------------------------------------------------

log "delivering $PUSHES signed push webhooks one at a time (the first cold), then $BREAKDOWN rounds of push, tag push, redelivery, PR closed, ping"
run_child python3 "$HERE/vcs/drive.py" deliver --url "$BASE" --secret-file "$SECRET_FILE" \
    --layout "$WORK/layout" --server-pid "$SERVER_PID" --clone-url "$CLONE_URL" \
    --commits "$WORK/commits.txt" --source "$SRC" --remote "$REMOTE" \
    --floor-dir "$WORK/floor" --breakdown-rounds "$BREAKDOWN" --http-pid "$HTTP_PID" >"$WORK/e2e.json"
python3 "$HERE/vcs/drive.py" store "$WORK/server/data/bosun.db" >"$WORK/store-after.json"

# --- report -----------------------------------------------------------------------------

python3 "$HERE/vcs/report.py" "$WORK" <<JSON
{"commit": "$GIT_REV", "dirty": $GIT_DIRTY, "rss_seeded_kib": $RSS_SEEDED, "busy_before_pct": $BUSY,
 "busy_route_pct": $BUSY_ROUTE}
JSON
