#!/usr/bin/env bash
# Host-plan benchmark: one workload (lineinfile, copy of templated content, a command, a
# directory, a shell step) on N = 10, 50 and 200 hosts — real sshd processes on loopback,
# host keys verified — with Bosun (`bosun plan exec`), Ansible (`ansible-playbook`, forks =
# hosts, pipelining and ControlPersist on, no fact gathering) and pyinfra (`--parallel`
# hosts), in one run: wall time of the whole command and peak memory of its whole process
# tree (sum of RSS, sampled every 50 ms). Goal at 50+ hosts: Bosun ≤ 0.25× Ansible's
# time and ≤ 0.5× pyinfra's.
#
# Usage: bench/plans.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_HOSTS="10 50 200" BENCH_REPEAT=2 BENCH_WARMUP=1
#                      BENCH_TOOLS="bosun ansible pyinfra" BENCH_SAMPLE_MS=50
#                      BENCH_TIMEOUT=1200 (seconds per run)
#                      BENCH_HOST_BASHRC=0 (1: the hosts' bash sources ~/.bashrc for every
#                      SSH command, as it does on this machine by default; see fleet.py)
#                      BENCH_KEEP=1 (keep the work area: tool outputs, inventories, sshd logs)
#
# stdout: a results table, then one JSON line with the same figures.
# stderr: progress (and a failed tool's last output lines).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
KEEP_WORK=${BENCH_KEEP:-0}
KEEP_WHAT="tool outputs, generated inventories and configs, sshd logs"

HOSTS=${BENCH_HOSTS:-10 50 200}
REPEAT=${BENCH_REPEAT:-2}
WARMUP=${BENCH_WARMUP:-1}
TOOLS=${BENCH_TOOLS:-bosun ansible pyinfra}
SAMPLE_MS=${BENCH_SAMPLE_MS:-50}
RUN_TIMEOUT=${BENCH_TIMEOUT:-1200}

for n in $HOSTS $REPEAT $WARMUP $SAMPLE_MS $RUN_TIMEOUT; do
    case $n in '' | *[!0-9]*) die "not a whole number: '$n' (check the BENCH_* knobs)" ;; esac
done
[ -n "$HOSTS" ] || die "BENCH_HOSTS is empty"
[ "$REPEAT" -ge 1 ] || die "BENCH_REPEAT must be at least 1"
MAX_HOSTS=0
MIN_HOSTS=
for n in $HOSTS; do
    [ "$n" -ge 1 ] && [ "$n" -le 999 ] || die "BENCH_HOSTS entries must be 1..999 (got $n)"
    [ "$n" -gt "$MAX_HOSTS" ] && MAX_HOSTS=$n
    if [ -z "$MIN_HOSTS" ] || [ "$n" -lt "$MIN_HOSTS" ]; then MIN_HOSTS=$n; fi
done
for t in $TOOLS; do
    case $t in bosun | ansible | pyinfra) ;; *) die "unknown tool '$t' in BENCH_TOOLS (bosun ansible pyinfra)" ;; esac
done
has_tool() { case " $TOOLS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# --- prerequisites ----------------------------------------------------------------------

[ -r /proc/stat ] || die "Linux /proc is required (memory sampling, CPU accounting)"
command -v python3 >/dev/null 2>&1 || die "python3 is required (bench/plans/*.py)"
command -v rustc >/dev/null 2>&1 || die "rustc is required (it builds bench/plans/measure.rs)"

SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)

# apt_install PACKAGE...: from the current package lists first, refreshed only if that fails.
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "$* missing and apt-get is unavailable; install $*"
    log "installing $* with apt-get"
    if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        "${SUDO[@]}" apt-get update -q >/dev/null
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
    fi
}

SSHD=/usr/sbin/sshd
[ -x "$SSHD" ] || apt_install openssh-server
[ -x "$SSHD" ] || die "no $SSHD after installing openssh-server"
for c in ssh ssh-keygen sftp; do
    command -v "$c" >/dev/null 2>&1 || apt_install openssh-client
    command -v "$c" >/dev/null 2>&1 || die "$c is missing (openssh-client)"
done
# sshd's privilege separation directory (Debian creates it at boot, containers often not).
if [ "$(id -u)" -eq 0 ] && [ ! -d /run/sshd ]; then
    mkdir -p -m 0755 /run/sshd
fi

# pip install that also works on Debian's own Python (PEP 668) and without pip yet; the
# same as scripts/test.sh.
pip_install() {
    if ! python3 -m pip --version >/dev/null 2>&1; then
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
    local cmd=(python3 -m pip install --quiet --disable-pip-version-check "$@")
    local err
    export PIP_ROOT_USER_ACTION=ignore
    if ! err=$("${cmd[@]}" 2>&1); then
        if grep -q externally-managed <<<"$err"; then
            "${cmd[@]}" --break-system-packages >&2 || die "pip install $* failed"
        else
            printf '%s\n' "$err" >&2
            die "pip install $* failed"
        fi
    fi
}

# The real console script of a pip-installed tool: the interpreter's scripts directory
# (then the user scheme's), else PATH. A pyenv or similar shim on PATH would add its own
# start-up (a shell script) to every timed run.
pip_script() {
    python3 - "$1" <<'PY' 2>/dev/null || command -v "$1" 2>/dev/null
import os, sys, sysconfig
for scheme in (None, os.name + "_user"):
    try:
        d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
    except KeyError:
        continue
    p = os.path.join(d, sys.argv[1])
    if os.access(p, os.X_OK):
        print(p)
        sys.exit(0)
sys.exit(1)
PY
}

ANSIBLE_PLAYBOOK=
ANSIBLE_VERSION=
if has_tool ansible; then
    ANSIBLE_PLAYBOOK=$(pip_script ansible-playbook || true)
    if [ -z "$ANSIBLE_PLAYBOOK" ] || ! "$ANSIBLE_PLAYBOOK" --version >/dev/null 2>&1; then
        log "ansible-playbook not found; installing it: python3 -m pip install ansible-core"
        pip_install ansible-core
        ANSIBLE_PLAYBOOK=$(pip_script ansible-playbook || true)
    fi
    [ -n "$ANSIBLE_PLAYBOOK" ] && "$ANSIBLE_PLAYBOOK" --version >/dev/null 2>&1 ||
        die "ansible-playbook does not run after installing ansible-core (or drop ansible from BENCH_TOOLS)"
    ANSIBLE_VERSION=$("$ANSIBLE_PLAYBOOK" --version 2>/dev/null) || die "$ANSIBLE_PLAYBOOK --version failed"
    ANSIBLE_VERSION=$(sed -n '1{s/^ansible-playbook //; s/[][]//g; s/^core //; p}' <<<"$ANSIBLE_VERSION")
    log "Ansible: $ANSIBLE_VERSION ($ANSIBLE_PLAYBOOK)"
fi

PYINFRA=
PYINFRA_VERSION=
if has_tool pyinfra; then
    PYINFRA=$(pip_script pyinfra || true)
    if [ -z "$PYINFRA" ] || ! "$PYINFRA" --version >/dev/null 2>&1; then
        log "pyinfra not found; installing it: python3 -m pip install pyinfra"
        pip_install pyinfra
        PYINFRA=$(pip_script pyinfra || true)
    fi
    [ -n "$PYINFRA" ] && "$PYINFRA" --version >/dev/null 2>&1 ||
        die "pyinfra does not run after installing it (or drop pyinfra from BENCH_TOOLS)"
    PYINFRA_VERSION=$("$PYINFRA" --version | sed 's/^pyinfra: *//')
    # --parallel is the flag this benchmark relies on; refuse a version without it.
    "$PYINFRA" --help 2>/dev/null | grep -q -- '--parallel' || die "this pyinfra has no --parallel flag"
    log "pyinfra: $PYINFRA_VERSION ($PYINFRA)"
fi

# Ansible runs its modules with Python on every host: the system's python3 (a host's own),
# named explicitly so no interpreter discovery round trip is added to the first task.
HOST_PYTHON=/usr/bin/python3
[ -x "$HOST_PYTHON" ] || HOST_PYTHON=$(python3 -c 'import sys; print(sys.executable)')

BOSUN_VERSION=
if has_tool bosun; then
    build_bosun
    if ! "$BIN" plan exec --help >/dev/null 2>&1; then
        "$BIN" plan exec --help >&2 || true
        die "'bosun plan exec' is not available in this build (or drop bosun from BENCH_TOOLS)"
    fi
    BOSUN_VERSION=$("$BIN" --version 2>/dev/null || echo bosun)
    BOSUN_VERSION=${BOSUN_VERSION%%$'\n'*}
    BOSUN_VERSION=${BOSUN_VERSION#bosun }
else
    GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    GIT_DIRTY=false
fi

# --- limits -----------------------------------------------------------------------------

# Per host at the peak (Ansible): the tool's worker, an ssh master and a mux client, and
# sshd's listener, session and privilege-separation processes, each with a few pipes and
# sockets. The tool's own process holds some per host too (pyinfra and Bosun: one socket).
need_files=$((MAX_HOSTS * 16 + 1024))
need_procs=$((MAX_HOSTS * 12 + 512))
raise_limit() { # raise_limit FLAG NEED WHAT
    local flag=$1 need=$2 what=$3 soft hard
    soft=$(ulimit -S "$flag")
    [ "$soft" = unlimited ] && return 0
    [ "$soft" -ge "$need" ] && return 0
    hard=$(ulimit -H "$flag")
    if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
        die "ulimit $flag ($what): hard limit $hard < $need needed for $MAX_HOSTS hosts; raise it or lower BENCH_HOSTS"
    fi
    ulimit -S "$flag" "$need" || die "cannot raise ulimit $flag ($what) to $need"
    log "raised ulimit $flag ($what) from $soft to $need"
}
raise_limit -n "$need_files" "open files"
raise_limit -u "$need_procs" "processes"

# --- work area, measurer, fleet ---------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bosun-bench-plans.XXXXXX")
FLEET_PID=
FLEET="$WORK/fleet"

stop_fleet() {
    [ -n "$FLEET_PID" ] || return 0
    kill -TERM "$FLEET_PID" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while kill -0 "$FLEET_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.1
    done
    kill -KILL "$FLEET_PID" 2>/dev/null || true
    wait "$FLEET_PID" 2>/dev/null || true
    FLEET_PID=
    # Backstop (the supervisor's sshd's also get SIGTERM from PR_SET_PDEATHSIG): any sshd of
    # this fleet still running, by the pid in its own pid file and only if its command line
    # names this work area.
    local f pid
    for f in "$FLEET"/hosts/*/sshd.pid; do
        [ -f "$f" ] || continue
        pid=$(<"$f")
        case $pid in '' | *[!0-9]*) continue ;; esac
        if grep -qF "$FLEET/" "/proc/$pid/cmdline" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
}

plans_cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if [ -n "$CHILD_PID" ]; then
        # The measurer kills the tool's whole process tree on TERM.
        kill -TERM "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
        CHILD_PID=
    fi
    stop_fleet
    (exit "$rc")
    cleanup # lib.sh: removes (or keeps) WORK and exits with rc
}
trap plans_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "building the measurer: rustc -O bench/plans/measure.rs"
rustc -O --edition 2021 -o "$WORK/measure" "$HERE/plans/measure.rs" >&2 || die "rustc failed on bench/plans/measure.rs"

log "starting $MAX_HOSTS sshd on 127.0.0.1 (work area $WORK)"
BENCH_SSHD=$SSHD python3 "$HERE/plans/fleet.py" up "$FLEET" "$MAX_HOSTS" 2>"$WORK/fleet.log" &
FLEET_PID=$!
deadline=$((SECONDS + 120))
while [ ! -e "$FLEET/ready" ]; do
    if ! kill -0 "$FLEET_PID" 2>/dev/null; then
        cat "$WORK/fleet.log" >&2
        FLEET_PID=
        die "the sshd fleet did not start (above: bench/plans/fleet.py's output)"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "the sshd fleet was not ready within 120 s"
    sleep 0.1
done
cat "$WORK/fleet.log" >&2
SSHD_VERSION=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sshd_version"])' "$FLEET/fleet.json")
CLK_TCK=$(getconf CLK_TCK)

# --- one run ----------------------------------------------------------------------------

RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
RUN_INDEX=0
FAILED_RUNS=0

# run_one TOOL N REP KIND: prepare, seed, run under the measurer, verify; appends a line
# to RESULTS. A failed run is recorded (and its output shown), not fatal.
run_one() {
    local tool=$1 n=$2 rep=$3 kind=$4
    RUN_INDEX=$((RUN_INDEX + 1))
    local dir="$WORK/runs/$RUN_INDEX-$tool-$n"
    local release="r$n-$rep-$tool"
    [ "$kind" = warmup ] && release="warmup-$tool"
    [ ! -s "$FLEET/dead" ] || die "an sshd of the fleet died: $(head -n 3 "$FLEET/dead")"
    kill -0 "$FLEET_PID" 2>/dev/null || die "the fleet supervisor exited; see $WORK/fleet.log"

    local prep=(python3 "$HERE/plans/workload.py" prepare "$tool" --fleet "$FLEET/fleet.json"
        --hosts "$n" --release "$release" --dir "$dir")
    local cmd=()
    case $tool in
    bosun)
        cmd=("$BIN" plan exec "$dir/plan.yml" --inventory "$dir/inventory.yml" --forks "$n")
        ;;
    ansible)
        prep+=(--python "$HOST_PYTHON" --cp-dir "$WORK/cp/$RUN_INDEX")
        cmd=(env ANSIBLE_CONFIG="$dir/ansible.cfg" ANSIBLE_NOCOLOR=1
            "$ANSIBLE_PLAYBOOK" -f "$n" -i "$dir/inventory.yml" "$dir/playbook.yml")
        ;;
    pyinfra)
        cmd=("$PYINFRA" inventory.py deploy.py -y --parallel "$n")
        ;;
    esac
    "${prep[@]}" || die "workload.py prepare failed for $tool, $n hosts"

    local host0 host1 busy0 total0 busy1 total1 rc=0
    host0=$(python3 "$HERE/plans/fleet.py" cpu "$FLEET")
    read -r busy0 total0 < <(machine_ticks)
    # The subshell runs in the run's directory (pyinfra reads inventory.py and deploy.py
    # from there) and execs the measurer, so CHILD_PID is the measurer itself.
    run_child bash -c 'cd "$1" && shift && exec "$@"' _ "$dir" \
        "$WORK/measure" --interval-ms "$SAMPLE_MS" --timeout-s "$RUN_TIMEOUT" \
        --out "$dir/measure.json" --log "$dir/output.log" -- "${cmd[@]}" || rc=$?
    read -r busy1 total1 < <(machine_ticks)
    [ "$rc" -eq 0 ] || die "the measurer failed (exit $rc) for $tool, $n hosts"
    # The hosts' sshd's reap a session when its connection closes: give them a moment
    # before reading their children's CPU time.
    sleep 1
    host1=$(python3 "$HERE/plans/fleet.py" cpu "$FLEET")

    local error= logins='{"logins_min": null, "logins_max": null}'
    error=$(python3 - "$dir/measure.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
if m["timed_out"]:
    print(f"timed out after {m['wall_s']:.0f} s")
elif m["exit_code"] != 0:
    print(f"exit code {m['exit_code']}" if m["exit_code"] is not None else f"killed by signal {m['signal']}")
PY
    )
    if [ -z "$error" ]; then
        if ! logins=$(python3 "$HERE/plans/workload.py" verify --fleet "$FLEET/fleet.json" \
            --hosts "$n" --release "$release" --dir "$dir" 2>"$dir/verify.txt"); then
            error="exit code 0 but the hosts are not as expected: $(head -n 3 "$dir/verify.txt" | tr '\n' ' ')"
            logins='{"logins_min": null, "logins_max": null}'
        fi
    fi
    local ok=true
    if [ -n "$error" ]; then
        ok=false
        FAILED_RUNS=$((FAILED_RUNS + 1))
        log "FAILED: $tool on $n hosts ($kind $rep): $error"
        if [ -s "$dir/verify.txt" ]; then
            cat "$dir/verify.txt" >&2
        fi
        printf -- '--- last lines of %s output (%s) ---\n' "$tool" "$dir/output.log" >&2
        tail -n 25 "$dir/output.log" >&2 || true
        printf -- '---\n' >&2
    fi
    python3 - "$dir/measure.json" "$tool" "$n" "$rep" "$kind" "$ok" "$error" "$logins" \
        "$(((host1 - host0)))" "$(((busy1 - busy0)))" "$CLK_TCK" "${BUSY_BEFORE:-null}" \
        >>"$RESULTS" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
tool, n, rep, kind, ok, error, logins, host_ticks, busy_ticks, tck, busy_before = sys.argv[2:]
tck = int(tck)
r = {"tool": tool, "hosts": int(n), "rep": int(rep), "kind": kind, "ok": ok == "true",
     "error": error or None, **m, **json.loads(logins),
     "host_cpu_s": int(host_ticks) / tck, "machine_cpu_s": int(busy_ticks) / tck,
     "busy_before": json.loads(busy_before)}
print(json.dumps(r))
PY
    if [ "$ok" = true ]; then
        python3 - "$RESULTS" >&2 <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"    {r['tool']:8} {r['hosts']:4} hosts, {r['kind']} {r['rep']}: {r['wall_s']:7.2f} s, "
      f"peak {r['peak_rss_kib'] / 1024:7.1f} MiB ({r['peak_procs']} processes; PSS {r['peak_pss_kib'] / 1024:.1f}), "
      f"tool CPU {r['tree_cpu_s']:.1f} s, host-side CPU {r['host_cpu_s']:.1f} s, "
      f"logins/host {r['logins_max']}")
PY
    fi
}

# --- the runs ---------------------------------------------------------------------------

if [ "$WARMUP" -ge 1 ]; then
    # One untimed (but verified) run per tool first: page cache, Python bytecode caches.
    log "warm-up: one untimed run per tool on $MIN_HOSTS hosts"
    BUSY_BEFORE=
    for tool in $TOOLS; do
        run_one "$tool" "$MIN_HOSTS" 0 warmup
    done
fi

read -r -a TOOL_ARR <<<"$TOOLS"
for n in $HOSTS; do
    BUSY_BEFORE=$(busy_now)
    log "$n hosts: machine ${BUSY_BEFORE}% busy before (1 s)"
    if [ "$BUSY_BEFORE" -gt 10 ]; then
        log "warning: machine ${BUSY_BEFORE}% busy before the $n-host runs (other processes); figures will be noisy"
    fi
    for rep in $(seq 1 "$REPEAT"); do
        # Rotate the order per repetition so no tool always runs right after another.
        k=${#TOOL_ARR[@]}
        for ((i = 0; i < k; i++)); do
            run_one "${TOOL_ARR[$(((i + rep - 1) % k))]}" "$n" "$rep" timed
        done
    done
done

# --- report -----------------------------------------------------------------------------

python3 - "$WORK/meta.json" <<PY
import json, sys
versions = {}
for k, v in (("bosun", "$BOSUN_VERSION"), ("ansible-core", "$ANSIBLE_VERSION"),
             ("pyinfra", "$PYINFRA_VERSION"), ("sshd", "$SSHD_VERSION"),
             ("python", "$(python3 -c 'import platform; print(platform.python_version())')")):
    if v:
        versions[k] = v
json.dump({"commit": "$GIT_REV", "dirty": json.loads("$GIT_DIRTY"), "tools": "$TOOLS".split(),
           "hosts": [int(x) for x in "$HOSTS".split()], "repeat": $REPEAT,
           "interval_ms": $SAMPLE_MS, "cores": $(nproc), "versions": versions,
           "host_bashrc": "${BENCH_HOST_BASHRC:-0}" == "1"},
          open(sys.argv[1], "w"))
PY
report_rc=0
python3 "$HERE/plans/report.py" "$RESULTS" "$WORK/meta.json" || report_rc=$?
if [ "$report_rc" -ne 0 ]; then
    [ "$KEEP_WORK" = 1 ] || log "$FAILED_RUNS run(s) failed; re-run with BENCH_KEEP=1 to keep every run's output"
    exit 1
fi
