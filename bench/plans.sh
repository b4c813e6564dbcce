#!/usr/bin/env bash
# Host-plan benchmark: one workload (lineinfile, copy of templated content, a command, a
# directory, a shell step) on N = 10, 50 and 200 hosts — real sshd processes on loopback,
# host keys verified — with the floor (plain OpenSSH: one connection and one shell script
# per host, all hosts at once), Bosun (`bosun plan exec`), pyinfra (`--parallel` hosts) and
# Ansible (`ansible-playbook`, forks = hosts, pipelining and ControlPersist on, no fact
# gathering), in one run: wall time of the whole command (and its ratio to the floor's),
# peak memory of its whole process tree (sum of RSS, sampled every 50 ms), CPU, and the
# remote shells it had sshd start per host. Every tool at every N runs on two fleets: the
# hosts' login shell as sshd starts it (bash reads the user's ~/.bashrc for every remote
# command) and with SHLVL=1 (bash skips it). Then a slow-host scenario: 50 hosts, one of
# which sleeps S seconds in the last step.
#
# Usage: bench/plans.sh            (from anywhere; see bench/README.md)
# Knobs (environment): BENCH_HOSTS="10 50 200" BENCH_REPEAT=2 BENCH_WARMUP=1
#                      BENCH_TOOLS="floor bosun pyinfra ansible" BENCH_SAMPLE_MS=50
#                      BENCH_SHELLS="login shlvl" (the fleets' shell variants; see fleet.py)
#                      BENCH_SLOW=1 BENCH_SLOW_SECS=3 (the slow-host scenario; 0: skip it)
#                      BENCH_TIMEOUT=1200 (seconds per run)
#                      BENCH_BOSUN_BIN=PATH (use this bosun binary; no cargo build)
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
TOOLS=${BENCH_TOOLS:-floor bosun pyinfra ansible}
SHELLS=${BENCH_SHELLS:-login shlvl}
SLOW=${BENCH_SLOW:-1}
SLOW_SECS=${BENCH_SLOW_SECS:-3}
SAMPLE_MS=${BENCH_SAMPLE_MS:-50}
RUN_TIMEOUT=${BENCH_TIMEOUT:-1200}
BOSUN_BIN=${BENCH_BOSUN_BIN:-}

if [ -n "${BENCH_HOST_BASHRC:-}" ]; then
    die "BENCH_HOST_BASHRC is retired: every run now measures both shell variants; BENCH_SHELLS=login (~/.bashrc read) or BENCH_SHELLS=shlvl (skipped) keeps one"
fi
for n in $HOSTS $REPEAT $WARMUP $SAMPLE_MS $RUN_TIMEOUT $SLOW $SLOW_SECS; do
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
# check_words KNOB ALLOWED VALUE: every word of VALUE is one of ALLOWED, none twice.
check_words() {
    local knob=$1 allowed=" $2 " seen=" " w
    [ -n "${3// /}" ] || die "$knob is empty"
    for w in $3; do
        case $allowed in *" $w "*) ;; *) die "unknown '$w' in $knob (one or more of: $2)" ;; esac
        case $seen in *" $w "*) die "'$w' twice in $knob" ;; esac
        seen="$seen$w "
    done
}
check_words BENCH_TOOLS "floor bosun pyinfra ansible" "$TOOLS"
check_words BENCH_SHELLS "login shlvl" "$SHELLS"
read -r -a TOOL_ARR <<<"$TOOLS"
read -r -a SHELL_ARR <<<"$SHELLS"
TOOLS=${TOOL_ARR[*]}
SHELLS=${SHELL_ARR[*]}
NSHELLS=${#SHELL_ARR[@]}
has_tool() { case " $TOOLS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# The slow-host scenario: the largest N ≤ 50 of BENCH_HOSTS, on the login-shell fleet (the
# first variant of BENCH_SHELLS if login is not among them); its last host is the slow one.
SLOW_HOSTS=
SLOW_SHELL=
if [ "$SLOW" = 1 ]; then
    [ "$SLOW_SECS" -ge 1 ] || die "BENCH_SLOW_SECS must be at least 1"
    for n in $HOSTS; do
        if [ "$n" -le 50 ] && { [ -z "$SLOW_HOSTS" ] || [ "$n" -gt "$SLOW_HOSTS" ]; }; then SLOW_HOSTS=$n; fi
    done
    case " $SHELLS " in *" login "*) SLOW_SHELL=login ;; *) SLOW_SHELL=${SHELL_ARR[0]} ;; esac
    if [ -z "$SLOW_HOSTS" ]; then
        log "no N ≤ 50 in BENCH_HOSTS: the slow-host scenario is skipped"
    elif [ "$SLOW_HOSTS" -lt 2 ]; then
        log "the slow-host scenario needs at least 2 hosts (largest N ≤ 50 is $SLOW_HOSTS): skipped"
        SLOW_HOSTS=
    fi
elif [ "$SLOW" != 0 ]; then
    die "BENCH_SLOW must be 0 or 1"
fi
SLOW_HOST=
[ -z "$SLOW_HOSTS" ] || SLOW_HOST=$(printf 'host-%03d' "$SLOW_HOSTS")

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
BOSUN_BIN_USED= # the binary's path when BENCH_BOSUN_BIN gave it (the report names it)
if has_tool bosun; then
    if [ -n "$BOSUN_BIN" ]; then
        # A given binary: what it was built from is not known here (GIT_DIRTY null).
        [ -x "$BOSUN_BIN" ] || die "BENCH_BOSUN_BIN=$BOSUN_BIN is not an executable file"
        BIN=$(cd "$(dirname "$BOSUN_BIN")" && pwd)/$(basename "$BOSUN_BIN")
        GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
        GIT_DIRTY=null
        BOSUN_BIN_USED=$BIN
        log "using the bosun binary $BIN (BENCH_BOSUN_BIN; not built here)"
    else
        build_bosun
    fi
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
# Processes count per user: every fleet's listeners too.
need_files=$((MAX_HOSTS * 16 + 1024))
need_procs=$((MAX_HOSTS * (12 + NSHELLS) + 512))
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
# One fleet per shell variant, side by side: $WORK/fleet-<variant>, supervised by its own
# fleet.py (pid in FLEET_PIDS[variant]).
declare -A FLEET_PIDS=()
fleet_dir() { printf '%s/fleet-%s' "$WORK" "$1"; }

# stop_fleet VARIANT: TERM to its supervisor (which stops its sshd's), KILL after 15 s,
# then, as a backstop, TERM to any sshd of that fleet still running.
stop_fleet() {
    local v=$1 pid=${FLEET_PIDS[$1]:-} dir
    dir=$(fleet_dir "$v")
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + 15))
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    unset "FLEET_PIDS[$v]"
    # Backstop (the supervisor's sshd's also get SIGTERM from PR_SET_PDEATHSIG): any sshd of
    # this fleet still running, by the pid in its own pid file and only if its command line
    # names this fleet's directory.
    local f spid
    for f in "$dir"/hosts/*/sshd.pid; do
        [ -f "$f" ] || continue
        spid=$(<"$f")
        case $spid in '' | *[!0-9]*) continue ;; esac
        if grep -qF "$dir/" "/proc/$spid/cmdline" 2>/dev/null; then
            kill -TERM "$spid" 2>/dev/null || true
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
    local v
    for v in $SHELLS; do
        stop_fleet "$v"
    done
    (exit "$rc")
    cleanup # lib.sh: removes (or keeps) WORK and exits with rc
}
trap plans_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "building the measurer: rustc -O bench/plans/measure.rs"
rustc -O --edition 2021 -o "$WORK/measure" "$HERE/plans/measure.rs" >&2 || die "rustc failed on bench/plans/measure.rs"

# start_fleet VARIANT: MAX_HOSTS sshd's with that shell variant; waits until they answer.
start_fleet() {
    local v=$1 dir pid
    dir=$(fleet_dir "$v")
    log "starting $MAX_HOSTS sshd on 127.0.0.1, shell variant $v ($dir)"
    BENCH_SSHD=$SSHD python3 "$HERE/plans/fleet.py" up "$dir" "$MAX_HOSTS" --shell "$v" 2>"$dir.log" &
    pid=$!
    FLEET_PIDS[$v]=$pid
    local deadline=$((SECONDS + 120))
    while [ ! -e "$dir/ready" ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$dir.log" >&2
            wait "$pid" 2>/dev/null || true
            unset "FLEET_PIDS[$v]"
            die "the sshd fleet ($v) did not start (above: bench/plans/fleet.py's output)"
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "the sshd fleet ($v) was not ready within 120 s"
        sleep 0.1
    done
    cat "$dir.log" >&2
}
# One after the other: a fleet's free ports are picked while the earlier ones listen.
for v in $SHELLS; do
    start_fleet "$v"
done
FIRST_FLEET=$(fleet_dir "${SHELL_ARR[0]}")
SSHD_VERSION=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sshd_version"])' "$FIRST_FLEET/fleet.json")
USER_SHELL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["user_shell"])' "$FIRST_FLEET/fleet.json")
CLK_TCK=$(getconf CLK_TCK)

# --- one run ----------------------------------------------------------------------------

RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
RUN_INDEX=0
FAILED_RUNS=0
NO_COUNTS='{"logins_min": null, "logins_max": null, "shells_min": null, "shells_max": null}'

# run_one TOOL N REP KIND SHELL [SLOW_HOST]: on the fleet of shell variant SHELL, prepare,
# seed, run under the measurer, verify; appends a line to RESULTS. With SLOW_HOST, that
# host's step (e) sleeps SLOW_SECS first (the slow-host scenario). A failed run is
# recorded (and its output shown), not fatal.
run_one() {
    local tool=$1 n=$2 rep=$3 kind=$4 shell=$5 slow_host=${6:-}
    local fleet scenario=normal
    fleet=$(fleet_dir "$shell")
    [ -z "$slow_host" ] || scenario=slow
    RUN_INDEX=$((RUN_INDEX + 1))
    local dir="$WORK/runs/$RUN_INDEX-$tool-$n-$shell-$scenario"
    local release="r$n-$rep-$tool-$shell-$scenario"
    [ "$kind" = warmup ] && release="warmup-$tool-$shell"
    [ ! -s "$fleet/dead" ] || die "an sshd of the $shell fleet died: $(head -n 3 "$fleet/dead")"
    kill -0 "${FLEET_PIDS[$shell]:-0}" 2>/dev/null || die "the $shell fleet's supervisor exited; see $fleet.log"

    local prep=(python3 "$HERE/plans/workload.py" prepare "$tool" --fleet "$fleet/fleet.json"
        --hosts "$n" --release "$release" --dir "$dir")
    [ -z "$slow_host" ] || prep+=(--slow-host "$slow_host" --slow-secs "$SLOW_SECS")
    local cmd=()
    case $tool in
    floor)
        cmd=(python3 "$HERE/plans/floor.py" "$dir/floor.json")
        ;;
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
    "${prep[@]}" || die "workload.py prepare failed for $tool, $n hosts ($shell)"

    local host0 host1 busy0 busy1 rc=0 _total
    host0=$(python3 "$HERE/plans/fleet.py" cpu "$fleet")
    read -r busy0 _total < <(machine_ticks)
    # The subshell runs in the run's directory (pyinfra reads inventory.py and deploy.py
    # from there) and execs the measurer, so CHILD_PID is the measurer itself.
    # shellcheck disable=SC2016 # $1 and $@ are the inner shell's
    run_child bash -c 'cd "$1" && shift && exec "$@"' _ "$dir" \
        "$WORK/measure" --interval-ms "$SAMPLE_MS" --timeout-s "$RUN_TIMEOUT" \
        --out "$dir/measure.json" --log "$dir/output.log" -- "${cmd[@]}" || rc=$?
    read -r busy1 _total < <(machine_ticks)
    [ "$rc" -eq 0 ] || die "the measurer failed (exit $rc) for $tool, $n hosts ($shell)"
    # The hosts' sshd's reap a session when its connection closes: give them a moment
    # before reading their children's CPU time.
    sleep 1
    host1=$(python3 "$HERE/plans/fleet.py" cpu "$fleet")

    local error='' counts=$NO_COUNTS
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
        if ! counts=$(python3 "$HERE/plans/workload.py" verify --fleet "$fleet/fleet.json" \
            --hosts "$n" --release "$release" --dir "$dir" 2>"$dir/verify.txt"); then
            error="exit code 0 but the hosts are not as expected: $(head -n 3 "$dir/verify.txt" | tr '\n' ' ')"
            counts=$NO_COUNTS
        fi
    fi
    local ok=true
    if [ -n "$error" ]; then
        ok=false
        FAILED_RUNS=$((FAILED_RUNS + 1))
        log "FAILED: $tool on $n hosts, $shell shell, $scenario ($kind $rep): $error"
        if [ -s "$dir/verify.txt" ]; then
            cat "$dir/verify.txt" >&2
        fi
        printf -- '--- last lines of %s output (%s) ---\n' "$tool" "$dir/output.log" >&2
        tail -n 25 "$dir/output.log" >&2 || true
        printf -- '---\n' >&2
    fi
    python3 - "$dir/measure.json" "$tool" "$n" "$rep" "$kind" "$shell" "$scenario" "$ok" "$error" \
        "$counts" "$((host1 - host0))" "$((busy1 - busy0))" "$CLK_TCK" "${BUSY_BEFORE:-null}" \
        >>"$RESULTS" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
(tool, n, rep, kind, shell, scenario, ok, error, counts, host_ticks, busy_ticks, tck,
 busy_before) = sys.argv[2:]
tck = int(tck)
r = {"tool": tool, "hosts": int(n), "rep": int(rep), "kind": kind, "shell": shell,
     "scenario": scenario, "ok": ok == "true", "error": error or None, **m,
     **json.loads(counts), "host_cpu_s": int(host_ticks) / tck,
     "machine_cpu_s": int(busy_ticks) / tck, "busy_before": json.loads(busy_before)}
print(json.dumps(r))
PY
    if [ "$ok" = true ]; then
        python3 - "$RESULTS" >&2 <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"    {r['tool']:8} {r['hosts']:4} hosts, {r['shell']:5} {r['scenario']:6} {r['kind']} {r['rep']}: "
      f"{r['wall_s']:7.2f} s, peak {r['peak_rss_kib'] / 1024:7.1f} MiB ({r['peak_procs']} processes; "
      f"PSS {r['peak_pss_kib'] / 1024:.1f}), tool CPU {r['tree_cpu_s']:.1f} s, host-side CPU "
      f"{r['host_cpu_s']:.1f} s, remote shells/host {r['shells_max']}, logins/host {r['logins_max']}")
PY
    fi
}

# --- the runs ---------------------------------------------------------------------------

if [ "$WARMUP" -ge 1 ]; then
    # One untimed (but verified) run per tool and fleet first: page cache, Python bytecode
    # caches, and a check that every fleet works.
    log "warm-up: one untimed run per tool and shell variant on $MIN_HOSTS hosts"
    BUSY_BEFORE=
    for shell in "${SHELL_ARR[@]}"; do
        for tool in "${TOOL_ARR[@]}"; do
            run_one "$tool" "$MIN_HOSTS" 0 warmup "$shell"
        done
    done
fi

# check_busy WHAT: the machine's busy share over 1 s, into BUSY_BEFORE (recorded per run).
check_busy() {
    BUSY_BEFORE=$(busy_now)
    log "$1: machine ${BUSY_BEFORE}% busy before (1 s)"
    if [ "$BUSY_BEFORE" -gt 10 ]; then
        log "warning: machine ${BUSY_BEFORE}% busy before the $1 runs (other processes); figures will be noisy"
    fi
}

# One round: every tool on every fleet. The order is rotated per repetition (the tools,
# and which fleet goes first) so no tool always runs right after another.
k=${#TOOL_ARR[@]}
m=${#SHELL_ARR[@]}
for n in $HOSTS; do
    check_busy "$n hosts"
    for rep in $(seq 1 "$REPEAT"); do
        for ((j = 0; j < m; j++)); do
            shell=${SHELL_ARR[$(((j + rep - 1) % m))]}
            for ((i = 0; i < k; i++)); do
                run_one "${TOOL_ARR[$(((i + rep - 1) % k))]}" "$n" "$rep" timed "$shell"
            done
        done
    done
done

if [ -n "$SLOW_HOSTS" ]; then
    check_busy "slow host ($SLOW_HOSTS hosts, $SLOW_HOST sleeps $SLOW_SECS s in step (e))"
    for rep in $(seq 1 "$REPEAT"); do
        for ((i = 0; i < k; i++)); do
            run_one "${TOOL_ARR[$(((i + rep - 1) % k))]}" "$SLOW_HOSTS" "$rep" timed "$SLOW_SHELL" "$SLOW_HOST"
        done
    done
fi

# --- report -----------------------------------------------------------------------------

python3 - "$WORK/meta.json" "$BOSUN_VERSION" "$ANSIBLE_VERSION" "$PYINFRA_VERSION" "$SSHD_VERSION" \
    "$GIT_REV" "$GIT_DIRTY" "$TOOLS" "$HOSTS" "$SHELLS" "$REPEAT" "$SAMPLE_MS" "$(nproc)" \
    "$USER_SHELL" "$SLOW_HOSTS" "$SLOW_HOST" "$SLOW_SECS" "$SLOW_SHELL" "$BOSUN_BIN_USED" <<'PY'
import json, platform, sys
(out, bosun, ansible, pyinfra, sshd, rev, dirty, tools, hosts, shells, repeat, sample_ms,
 cores, user_shell, slow_hosts, slow_host, slow_secs, slow_shell, bosun_bin) = sys.argv[1:]
versions = {}
for k, v in (("bosun", bosun), ("ansible-core", ansible), ("pyinfra", pyinfra), ("sshd", sshd),
             ("python", platform.python_version())):
    if v:
        versions[k] = v
slow = None
if slow_hosts:
    slow = {"hosts": int(slow_hosts), "host": slow_host, "secs": int(slow_secs),
            "shell": slow_shell, "sleeping_steps": 1}
json.dump({"commit": rev, "dirty": json.loads(dirty), "tools": tools.split(),
           "hosts": [int(x) for x in hosts.split()], "shells": shells.split(),
           "repeat": int(repeat), "interval_ms": int(sample_ms), "cores": int(cores),
           "versions": versions, "user_shell": user_shell, "slow": slow,
           "bosun_bin": bosun_bin or None},
          open(out, "w"))
PY
report_rc=0
python3 "$HERE/plans/report.py" "$RESULTS" "$WORK/meta.json" || report_rc=$?
if [ "$report_rc" -ne 0 ]; then
    [ "$KEEP_WORK" = 1 ] || log "$FAILED_RUNS run(s) failed; re-run with BENCH_KEEP=1 to keep every run's output"
    exit 1
fi
