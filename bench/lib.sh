# Shared by the bench/*.sh drivers; sourced, not run: . "$HERE/lib.sh"
# The sourcing script sets HERE and ROOT first. Its own state, which these functions read
# and set (all globals): WORK, BIN, SERVER_PID, SERVER_LOG, TOKEN_FILE, BASE, CHILD_PID,
# SAMPLER_PID, GIT_REV, GIT_DIRTY; and STARTUP_TIMEOUT, STOP_TIMEOUT, KEEP_WORK, KEEP_WHAT
# (defaults below) to tune them.
# shellcheck shell=bash

BENCH_NAME=${BASH_SOURCE[1]##*/} # e.g. stacks.sh, for error messages
STARTUP_TIMEOUT=60                # seconds to wait for the server's "listening on" line
STOP_TIMEOUT=10                   # seconds between the server's TERM and KILL
KEEP_WORK=0                       # 1: cleanup keeps $WORK (and says so) instead of removing it
KEEP_WHAT=                        # what the kept $WORK holds, for that message
WORK=
SERVER_PID=
SERVER_LOG=
SAMPLER_PID=
CHILD_PID=

log() { printf '==> %s\n' "$*" >&2; }
die() {
    printf '%s: %s\n' "$BENCH_NAME" "$*" >&2
    exit 1
}

# --- build ------------------------------------------------------------------------------

# Records what is being measured (GIT_REV: the commit; GIT_DIRTY: whether crates/ had local
# changes), builds the release binary and sets BIN to it.
build_bosun() {
    GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    GIT_DIRTY=false
    if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- crates Cargo.toml Cargo.lock 2>/dev/null || true)" ]; then
        GIT_DIRTY=true
    fi

    log "building: cargo build --release -p bosun (commit $GIT_REV, local changes: $GIT_DIRTY)"
    (cd "$ROOT" && cargo build --release -p bosun) >&2
    BIN="$ROOT/target/release/bosun"
    [ -x "$BIN" ] || die "no binary at $BIN"
}

# Installs wrk with apt-get (using sudo when not root) when it is missing, running
# apt-get update only if the first attempt fails.
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

# --- processes --------------------------------------------------------------------------

# Runs "$@" in the background and waits for it: bash defers traps while a foreground
# command runs, so this keeps Ctrl-C / TERM prompt during the long phases.
run_child() {
    "$@" &
    CHILD_PID=$!
    local rc=0
    wait "$CHILD_PID" || rc=$?
    CHILD_PID=
    return "$rc"
}

# launch_server DIR RUNNERS [FLAG...]: starts the server on a loopback port with RUNNERS
# embedded runners, data dir DIR/data (which must exist), any further server flags, stdout
# DIR/server.out and stderr SERVER_LOG=DIR/server.log; sets SERVER_PID and TOKEN_FILE,
# waits for the address line (printed once the socket is bound) and the admin token, and
# sets BASE (https://… when the flags turn TLS on).
launch_server() {
    local dir=$1 runners=$2
    shift 2
    SERVER_LOG="$dir/server.log"
    TOKEN_FILE="$dir/data/admin-token"
    # Created here, not by the background job's redirections, so the polling below never
    # races the child to the file.
    : >"$SERVER_LOG"
    : >"$dir/server.out"
    "$BIN" server --listen 127.0.0.1:0 --data-dir "$dir/data" --local-runners "$runners" "$@" \
        >"$dir/server.out" 2>"$SERVER_LOG" &
    SERVER_PID=$!
    local addr= deadline=$((SECONDS + STARTUP_TIMEOUT))
    while :; do
        addr=$(sed -n 's|^bosun: listening on \(https\{0,1\}://127\.0\.0\.1:[0-9][0-9]*\).*$|\1|p' "$SERVER_LOG" | head -n 1)
        [ -n "$addr" ] && [ -s "$TOKEN_FILE" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || die "server exited during startup"
        [ "$SECONDS" -lt "$deadline" ] || die "server not ready within ${STARTUP_TIMEOUT}s"
        sleep 0.05
    done
    BASE="$addr"
}

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        local deadline=$((SECONDS + STOP_TIMEOUT))
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
        # A driver may have children of its own (terraform); TERM lets them finish.
        kill "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
    fi
    if [ -n "$SAMPLER_PID" ]; then
        kill "$SAMPLER_PID" 2>/dev/null || true
        wait "$SAMPLER_PID" 2>/dev/null || true
    fi
    stop_server
    if [ "$rc" -ne 0 ] && [ -n "$SERVER_LOG" ] && [ -s "$SERVER_LOG" ]; then
        printf '%s: failed (exit %s); last server log lines:\n' "$BENCH_NAME" "$rc" >&2
        tail -n 20 "$SERVER_LOG" >&2 || true
    fi
    if [ "$KEEP_WORK" = 1 ]; then
        printf '%s: kept the work area %s (%s)\n' "$BENCH_NAME" "$WORK" "$KEEP_WHAT" >&2
    elif [ -n "$WORK" ]; then
        rm -rf "$WORK"
    fi
    exit "$rc"
}

# Call once WORK exists: from then on any exit stops the server and removes WORK.
install_cleanup() {
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# --- machine and server readings (Linux /proc) -------------------------------------------

# Prints "busy total" jiffies for the whole machine, from the first line of /proc/stat.
machine_ticks() {
    local _cpu user nice system idle iowait irq softirq steal _rest
    read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
    local busy=$((user + nice + system + irq + softirq + steal))
    echo "$busy $((busy + idle + iowait))"
}

# The figures mean little if something else is using the CPUs: prints the machine's busy
# share (%) over one second, to be taken while our server is idle.
busy_now() {
    local b0 t0 b1 t1
    read -r b0 t0 < <(machine_ticks)
    sleep 1
    read -r b1 t1 < <(machine_ticks)
    echo $(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
}

# Prints the server's CPU time so far (user + system), in clock ticks.
server_ticks() {
    local s
    s=$(<"/proc/$SERVER_PID/stat")
    s=${s##*) } # drop "pid (comm) "; fields now start at 3 (state)
    local f
    read -r -a f <<<"$s"
    echo $((f[11] + f[12])) # utime (field 14), stime (field 15)
}

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

# Starts a background loop that keeps the peak VmRSS (KiB) seen so far of process $2
# (default: the server, SERVER_PID) in file $1, reading /proc every 100 ms; the loop's pid
# is SAMPLER_PID. No forks per sample besides sleep.
start_sampler() {
    local out=$1 pid=${2:-$SERVER_PID}
    SERVER_PID=$pid rss_kib >"$out"
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
            done <"/proc/$pid/status" || exit 0
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

# The PostgreSQL server a bench uses: BENCH_DATABASE_URL's (PG_ADMIN_URL set from it by the
# caller), else a throwaway one from scripts/postgres.sh (PG_STARTED=1: the caller stops
# it). Sets PG_ADMIN_URL, PG_STARTED and PG_VERSION.
open_postgres() {
    if [ -z "$PG_ADMIN_URL" ]; then
        # shellcheck source=scripts/postgres.sh
        . "$ROOT/scripts/postgres.sh"
        start_test_postgres >&2 || die "cannot start a PostgreSQL server (or set BENCH_DATABASE_URL)"
        PG_ADMIN_URL=$BOSUN_TEST_DATABASE_URL
        PG_STARTED=1
    fi
    PG_VERSION=$(psql "$PG_ADMIN_URL" -X -q -t -A -c 'SHOW server_version' 2>/dev/null) ||
        die "cannot reach PostgreSQL at $PG_ADMIN_URL"
    log "PostgreSQL $PG_VERSION at $PG_ADMIN_URL"
}
