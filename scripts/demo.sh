#!/usr/bin/env bash
# The Quickstart's main job on the embedded default: build, start `bosun server` with its
# SQLite store in ./.bosun, create a stack through the CLI, show it, and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

log "building bosun"
cargo build --release --quiet -p bosun
BOSUN=target/release/bosun
DATA_DIR=${BOSUN_DATA_DIR:-.bosun}
LOG=$(mktemp)

log "starting bosun server (data dir $DATA_DIR)"
"$BOSUN" server --listen 127.0.0.1:0 --data-dir "$DATA_DIR" 2>"$LOG" &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; rm -f "$LOG"' EXIT

url=
for _ in $(seq 1 300); do
  url=$(sed -n 's/^bosun: listening on //p' "$LOG" | head -n 1)
  [ -n "$url" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "server did not start" >&2; cat "$LOG" >&2; exit 1; }

export BOSUN_URL=$url
export BOSUN_TOKEN=${BOSUN_TOKEN:-$(cat "$DATA_DIR/admin-token")}
log "server at $BOSUN_URL; admin token in $DATA_DIR/admin-token"

"$BOSUN" whoami
if ! "$BOSUN" stack show networking >/dev/null 2>&1; then
  log "bosun stack create networking"
  "$BOSUN" stack create networking \
    --name "Networking" \
    --repository github:acme/infra \
    --path stacks/networking \
    --watch-path modules/vpc \
    --var TF_VAR_region=eu-west-1 \
    --tier medium
fi
log "bosun stack list"
"$BOSUN" stack list
log "bosun stack show networking"
"$BOSUN" stack show networking
log "done; stopping the server (SIGTERM, graceful)"
