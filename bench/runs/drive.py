#!/usr/bin/env python3
"""Drive runs on a running `bosun server` (with embedded runners) for bench/runs.sh.

Standard library only. Two modes, each printing one JSON document on stdout:

  latency     creates runs one at a time on one stack and waits for each to finish, so
              the runners are idle when every run is created. Per run it records the
              server's `created_at`, the first start of the engine (a line the no-op
              engine wrapper appends to its log, matched to the run by its workspace
              directory) and the server's phase timings.

  throughput  keeps `--slots` runs outstanding for `--warmup` + `--seconds` seconds: each
              slot owns one stack and loops "create a run, wait for it to finish". A run
              is counted when its server-side finish time (`updated_at` of the finished
              run) falls in the measurement window after the warm-up. One stack per slot
              means no two runs of a stack ever overlap, so a real engine never waits on
              (or fails for) its own state lock.

Any run that ends in a state other than `finished` fails the benchmark, so a broken
engine or repository cannot pass as a fast result.
"""

import argparse
import datetime
import http.client
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

TERMINAL = {"finished", "failed", "discarded", "canceled", "interrupted", "force_failed", "skipped"}
RUN_TIMEOUT = 300.0  # seconds one run may take before the benchmark gives up


class ApiError(Exception):
    pass


class Client:
    """One keep-alive HTTP connection (one per thread)."""

    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self.conn = None

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        # GETs are resent once on a dropped keep-alive connection; a POST is never resent
        # (a duplicate run would skew the figures).
        attempts = 3 if method == "GET" else 1
        for attempt in range(attempts):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                self.conn.request(method, path, body=data, headers=self.headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == attempts - 1:
                    raise
                time.sleep(0.05)
        if resp.status >= 300:
            raise ApiError(f"{method} {path}: HTTP {resp.status}: {raw[:300]!r}")
        return json.loads(raw) if raw else None


def ts(s):
    """An RFC 3339 timestamp from the server (UTC, `Z`, ms) as Unix seconds."""
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def pct(values, p):
    """The p-th percentile by nearest rank (p99 of 200 samples is the 198th smallest)."""
    v = sorted(values)
    if not v:
        return None
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)]


def stats(values):
    if not values:
        return None
    return {
        "p50": round(pct(values, 50), 2),
        "p90": round(pct(values, 90), 2),
        "p99": round(pct(values, 99), 2),
        "max": round(max(values), 2),
        "mean": round(sum(values) / len(values), 2),
    }


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_snapshot(pid):
    """CPU counters now: the server's own and its reaped children's (git, the engine)
    ticks, the machine's busy and total ticks (all CPUs), and this driver's seconds
    (its own and its children's: the floor's git commands)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14..17
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (cpu + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    t = os.times()  # the driver, and the git clones it ran for the floor
    return own, children, busy, busy + idle + iowait, t.user + t.system + t.children_user + t.children_system


def cpu_delta(a, b):
    """Cores' worth of CPU between two snapshots, and how busy the machine was, split
    into this benchmark (server, its children, the driver) and everything else."""
    own, children, busy, total = (b[i] - a[i] for i in range(4))
    driver = b[4] - a[4]
    cpus = os.cpu_count() or 1
    if total <= 0:
        return None
    wall = total / cpus / CLK_TCK  # seconds
    ours = (own + children) / CLK_TCK + driver
    return {
        "server_cores": round(own / CLK_TCK / wall, 2),
        "children_cores": round(children / CLK_TCK / wall, 2),
        "driver_cores": round(driver / wall, 2),
        "machine_busy_pct": round(busy * 100 / total),
        "others_busy_pct": max(0, round((busy / CLK_TCK - ours) * 100 / (wall * cpus))),
    }


def pressure():
    """Cumulative stall time (µs) from Linux PSI: (io some, cpu some), or None if absent.
    "io some" counts time in which at least one task waited for I/O (fsyncs stuck behind
    someone else's writes show up here); "cpu some", time a runnable task waited for a CPU.
    """
    out = []
    for res in ("io", "cpu"):
        try:
            with open(f"/proc/pressure/{res}") as f:
                line = f.readline()  # "some avg10=… avg60=… avg300=… total=N"
            out.append(int(line.rsplit("total=", 1)[1]))
        except (OSError, IndexError, ValueError):
            return None
    return out


def create_stack(client, org, stack_id, repo, engine_binary):
    body = {
        "id": stack_id,
        "repository": repo,
        "engine": "terraform",
        "engine_binary": engine_binary,
        "autodeploy": False,
    }
    client.request("POST", f"/api/v1/orgs/{org}/stacks", body)


def phase_seconds(run, state):
    for p in run["phases"]:
        if p["state"] == state and p["seconds"] is not None:
            return p["seconds"]
    return None


def wait_finished(client, org, run_id, first_poll, poll):
    """Polls the run until it ends; returns it. `first_poll` seconds before the first look."""
    deadline = time.monotonic() + RUN_TIMEOUT
    if first_poll > 0:
        time.sleep(first_poll)
    polls = 0
    while True:
        run = client.request("GET", f"/api/v1/orgs/{org}/runs/{run_id}")
        polls += 1
        if run["state"] in TERMINAL:
            if run["state"] != "finished":
                raise ApiError(
                    f"run {run_id} ended {run['state']}: {run.get('reason')!r} "
                    f"(see GET /api/v1/orgs/{org}/runs/{run_id}/logs)"
                )
            return run, polls
        if time.monotonic() > deadline:
            raise ApiError(f"run {run_id} not finished after {RUN_TIMEOUT:.0f}s (state {run['state']})")
        time.sleep(poll)


def engine_starts(path):
    """Run id -> first engine start (Unix seconds), from the no-op engine's log."""
    starts = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 3:
                    continue
                t = int(parts[0]) / 1e6
                # <work dir>/<run id>-plan-<fencing>/src
                ws = os.path.basename(os.path.dirname(parts[1]))
                run_id = ws.rsplit("-", 2)[0] if ws.count("-") >= 2 else ws
                if run_id not in starts or t < starts[run_id]:
                    starts[run_id] = t
    except FileNotFoundError:
        pass
    return starts


def git_floor(repo, parent, branch="main"):
    """What the runner does before the engine starts, done directly: a fresh private
    workspace, `git clone --quiet --branch main -- REPO src`, `git rev-parse HEAD`. Returns
    the milliseconds it took (the workspace is removed afterwards, untimed)."""
    ws = os.path.join(parent, f"floor-{os.getpid()}")
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": ws,
           "GIT_TERMINAL_PROMPT": "0"}
    t = time.perf_counter()
    os.makedirs(ws, mode=0o700)
    subprocess.run(["git", "clone", "--quiet", "--branch", branch, "--", repo, "src"], cwd=ws,
                   env=env, check=True, stdin=subprocess.DEVNULL)
    subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.join(ws, "src"), env=env, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    ms = (time.perf_counter() - t) * 1000
    shutil.rmtree(ws)
    return ms


def latency(args, token):
    c = Client(args.url, token)
    create_stack(c, args.org, args.stack, args.repo, args.engine_binary)
    path = f"/api/v1/orgs/{args.org}/stacks/{args.stack}/runs"
    rows, floors = [], []
    total = args.warmup_runs + args.runs
    t_begin = time.time()
    cpu0 = None
    for i in range(total):
        if i == args.warmup_runs:
            cpu0 = cpu_snapshot(args.server_pid)
        time.sleep(args.gap_ms / 1000)  # the runners are back in their long poll
        psi0 = pressure()
        sent = time.time()
        run = c.request("POST", path, {"kind": args.kind})
        answered = time.time()
        run, _ = wait_finished(c, args.org, run["id"], 0, args.poll_ms / 1000)
        psi1 = pressure()
        # The floor, right after the run, under the same conditions (the same file system,
        # the same moment's load): the checkout the runner did, without Bosun around it.
        floor = git_floor(args.repo, args.floor_dir) if args.floor_dir else None
        if i < args.warmup_runs:
            continue
        floors.append(floor)
        stall = None if psi0 is None or psi1 is None else [(b - a) / 1000 for a, b in zip(psi0, psi1)]
        rows.append((run, sent, answered, stall))
    cpu1 = cpu_snapshot(args.server_pid)
    starts = engine_starts(args.engine_log)
    dispatch, lease, preparing, to_engine, total_ms, post_ms = [], [], [], [], [], []
    slow, stalls_fast, stalls_slow = [], [], []
    for run, sent, answered, stall in rows:
        created = ts(run["created_at"])
        if run["id"] not in starts:
            raise ApiError(f"no engine start recorded for run {run['id']} in {args.engine_log}")
        engine = starts[run["id"]]
        dispatch.append((engine - created) * 1000)
        lease.append(phase_seconds(run, "queued") * 1000)
        preparing.append(phase_seconds(run, "preparing") * 1000)
        prep_end = created + (phase_seconds(run, "queued") + phase_seconds(run, "preparing"))
        to_engine.append((engine - prep_end) * 1000)
        total_ms.append((ts(run["updated_at"]) - created) * 1000)
        post_ms.append((answered - sent) * 1000)
        if dispatch[-1] > args.slow_ms:
            slow.append({
                "dispatch_ms": round(dispatch[-1], 1),
                "lease_ms": round(lease[-1], 1),
                "preparing_ms": round(preparing[-1], 1),
                "io_stall_ms": None if stall is None else round(stall[0], 1),
                "cpu_stall_ms": None if stall is None else round(stall[1], 1),
            })
        if stall is not None:
            (stalls_slow if dispatch[-1] > args.slow_ms else stalls_fast).append(stall)

    def median_stalls(xs):
        if not xs:
            return None
        return {"io_ms": round(pct([x[0] for x in xs], 50), 1),
                "cpu_ms": round(pct([x[1] for x in xs], 50), 1)}

    return {
        "mode": "latency",
        "runs": len(rows),
        "warmup_runs": args.warmup_runs,
        "kind": args.kind,
        "seconds": round(time.time() - t_begin, 2),
        "dispatch_ms": stats(dispatch),
        "lease_ms": stats(lease),
        "preparing_ms": stats(preparing),
        "started_to_engine_ms": stats(to_engine),
        "run_total_ms": stats(total_ms),
        "create_request_ms": stats(post_ms),
        "git_floor_ms": stats([f for f in floors if f is not None]),
        # Per run: dispatch minus the floor measured right after it (Bosun's own part).
        "dispatch_minus_floor_ms": stats([d - f for d, f in zip(dispatch, floors) if f is not None]),
        "dispatch_samples_ms": [round(x, 1) for x in dispatch],
        "slow_threshold_ms": args.slow_ms,
        "slow_runs": slow,
        # Median system-wide stall time (PSI "some") during a run, for the runs under and
        # over the threshold: were the slow ones waiting on disk or CPU?
        "stalls_during_fast_runs": median_stalls(stalls_fast),
        "stalls_during_slow_runs": median_stalls(stalls_slow),
        "cpu": cpu_delta(cpu0, cpu1),
    }


def throughput(args, token):
    setup = Client(args.url, token)
    stacks = [f"{args.stack}-{i:02d}" for i in range(args.slots)]
    for s in stacks:
        create_stack(setup, args.org, s, args.repo, args.engine_binary)
    done = []  # finished runs (the run JSON), across slots
    errors = []
    polls = [0]
    lock = threading.Lock()
    t0 = time.time() + 0.2
    w_start = t0 + args.warmup
    w_end = w_start + args.seconds

    def slot(stack):
        c = Client(args.url, token)
        path = f"/api/v1/orgs/{args.org}/stacks/{stack}/runs"
        # The first look at a run comes after 70 % of the recent run time (a moving
        # average), then every poll interval or 5 % of that time, whichever is longer: a
        # handful of requests per run, however long runs take.
        avg = None
        try:
            time.sleep(max(0.0, t0 - time.time()))
            while time.time() < w_end and not errors:
                run = c.request("POST", path, {"kind": args.kind})
                poll = args.poll_ms / 1000
                first = 0.7 * avg if avg is not None else poll
                if avg is not None:
                    poll = max(poll, avg / 20)
                run, n = wait_finished(c, args.org, run["id"], first, poll)
                took = ts(run["updated_at"]) - ts(run["created_at"])
                avg = took if avg is None else 0.8 * avg + 0.2 * took
                with lock:
                    done.append(run)
                    polls[0] += n
        except Exception as e:  # noqa: BLE001 - reported and fails the benchmark
            with lock:
                errors.append(f"{stack}: {e}")

    cpu = {}

    def sampler():
        for name, at in (("start", w_start), ("end", w_end)):
            time.sleep(max(0.0, at - time.time()))
            cpu[name] = cpu_snapshot(args.server_pid)

    watch = threading.Thread(target=sampler, daemon=True)
    watch.start()
    threads = [threading.Thread(target=slot, args=(s,), daemon=True) for s in stacks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise ApiError(f"{len(errors)} slot(s) failed; first: {errors[0]}")
    watch.join()
    in_window = [r for r in done if w_start <= ts(r["updated_at"]) < w_end]
    if not in_window:
        raise ApiError("no run finished inside the measurement window")
    secs = w_end - w_start
    total_ms = [(ts(r["updated_at"]) - ts(r["created_at"])) * 1000 for r in in_window]

    def phase(state):
        return stats([(phase_seconds(r, state) or 0) * 1000 for r in in_window])

    return {
        "mode": "throughput",
        "slots": args.slots,
        "kind": args.kind,
        "warmup_seconds": args.warmup,
        "window_seconds": secs,
        "window_start": w_start,
        "window_end": w_end,
        "runs_in_window": len(in_window),
        "runs_total": len(done),
        "runs_per_minute": round(len(in_window) / secs * 60, 1),
        "run_total_ms": stats(total_ms),
        "queued_ms": phase("queued"),
        "preparing_ms": phase("preparing"),
        "planning_ms": phase("planning"),
        "polls_per_run": round(polls[0] / len(done), 2),
        "cpu": cpu_delta(cpu["start"], cpu["end"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["latency", "throughput"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--server-pid", type=int, required=True, help="for CPU accounting")
    ap.add_argument("--org", default="default")
    ap.add_argument("--repo", required=True, help="the stack repository (file:// URL)")
    ap.add_argument("--engine-binary", required=True)
    ap.add_argument("--engine-log", help="the no-op engine's log (latency mode)")
    ap.add_argument("--floor-dir", help="latency: also time a direct clone after each run, here")
    ap.add_argument("--stack", default="bench", help="stack id (throughput: id prefix)")
    ap.add_argument("--kind", default="proposed")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup-runs", type=int, default=5)
    ap.add_argument("--gap-ms", type=float, default=50, help="idle time before each latency run")
    ap.add_argument("--poll-ms", type=float, default=5)
    ap.add_argument("--slow-ms", type=float, default=100, help="latency: list runs slower than this")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=5)
    args = ap.parse_args()
    with open(args.token_file) as f:
        token = f.read().strip()
    try:
        if args.mode == "latency":
            if not args.engine_log:
                ap.error("latency needs --engine-log")
            out = latency(args, token)
        else:
            out = throughput(args, token)
    except ApiError as e:
        sys.exit(f"drive.py {args.mode}: {e}")
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
