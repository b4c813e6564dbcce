#!/usr/bin/env python3
"""Drive runs on one or more `bosun server` replicas of one database, for bench/scale.sh.

Standard library only; reuses bench/runs/drive.py's client, run polling and statistics.
Two modes, each printing one JSON document on stdout:

  latency     creates proposed runs one at a time on one stack, alternating between the
              replicas (`--url` repeated), and waits for each to finish, so the runners
              are idle when every run is created. Dispatch latency is the server's
              `created_at` → the first start of the engine (the no-op engine's log,
              matched to the run by its workspace directory). With two replicas half of
              the runs are created on a replica other than the one an idle runner waits
              on: the cross-replica wake-up is in the figure.

  throughput  keeps `--slots` runs outstanding for `--warmup` + `--seconds` seconds: each
              slot owns one stack and loops "create a run (on the slot's replica: slot i
              uses URL i mod n), wait for it to finish". A run counts when its
              server-side finish time falls in the window after the warm-up.

Any run that ends in a state other than `finished` fails the benchmark.
"""

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runs"))
import drive as runs  # noqa: E402  (bench/runs/drive.py)


def latency(args, token):
    clients = [runs.Client(u, token) for u in args.url]
    runs.create_stack(clients[0], args.org, args.stack, args.repo, args.engine_binary)
    path = f"/api/v1/orgs/{args.org}/stacks/{args.stack}/runs"
    rows = []
    t_begin = time.time()
    for i in range(args.warmup_runs + args.runs):
        c = clients[i % len(clients)]
        time.sleep(args.gap_ms / 1000)  # the runners are back in their long poll
        run = c.request("POST", path, {"kind": "proposed"})
        run, _ = runs.wait_finished(c, args.org, run["id"], 0, args.poll_ms / 1000)
        if i >= args.warmup_runs:
            rows.append((i % len(clients), run))
    starts = runs.engine_starts(args.engine_log)
    dispatch, lease, by_replica = [], [], {}
    for replica, run in rows:
        if run["id"] not in starts:
            raise runs.ApiError(f"no engine start recorded for run {run['id']} in {args.engine_log}")
        ms = (starts[run["id"]] - runs.ts(run["created_at"])) * 1000
        dispatch.append(ms)
        lease.append(runs.phase_seconds(run, "queued") * 1000)
        by_replica.setdefault(replica, []).append(ms)
    return {
        "mode": "latency",
        "replicas": len(clients),
        "runs": len(rows),
        "seconds": round(time.time() - t_begin, 2),
        "dispatch_ms": runs.stats(dispatch),
        "lease_ms": runs.stats(lease),
        "dispatch_by_create_replica_ms": {str(k): runs.stats(v) for k, v in sorted(by_replica.items())},
    }


def throughput(args, token):
    setup = runs.Client(args.url[0], token)
    stacks = [f"{args.stack}-{i:02d}" for i in range(args.slots)]
    for s in stacks:
        runs.create_stack(setup, args.org, s, args.repo, args.engine_binary)
    done, errors, lock = [], [], threading.Lock()
    t0 = time.time() + 0.2
    w_start = t0 + args.warmup
    w_end = w_start + args.seconds

    def slot(i, stack):
        c = runs.Client(args.url[i % len(args.url)], token)
        path = f"/api/v1/orgs/{args.org}/stacks/{stack}/runs"
        avg = None
        try:
            time.sleep(max(0.0, t0 - time.time()))
            while time.time() < w_end and not errors:
                run = c.request("POST", path, {"kind": "proposed"})
                poll = args.poll_ms / 1000
                first = 0.7 * avg if avg is not None else poll
                if avg is not None:
                    poll = max(poll, avg / 20)
                run, _ = runs.wait_finished(c, args.org, run["id"], first, poll)
                took = runs.ts(run["updated_at"]) - runs.ts(run["created_at"])
                avg = took if avg is None else 0.8 * avg + 0.2 * took
                with lock:
                    done.append(run)
        except Exception as e:  # noqa: BLE001 - reported and fails the benchmark
            with lock:
                errors.append(f"{stack}: {e}")

    threads = [threading.Thread(target=slot, args=(i, s), daemon=True) for i, s in enumerate(stacks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise runs.ApiError(f"{len(errors)} slot(s) failed; first: {errors[0]}")
    in_window = [r for r in done if w_start <= runs.ts(r["updated_at"]) < w_end]
    if not in_window:
        raise runs.ApiError("no run finished inside the measurement window")
    secs = w_end - w_start
    return {
        "mode": "throughput",
        "replicas": len(args.url),
        "slots": args.slots,
        "window_seconds": secs,
        "runs_in_window": len(in_window),
        "runs_per_minute": round(len(in_window) / secs * 60, 1),
        "run_total_ms": runs.stats([(runs.ts(r["updated_at"]) - runs.ts(r["created_at"])) * 1000
                                    for r in in_window]),
        "queued_ms": runs.stats([(runs.phase_seconds(r, "queued") or 0) * 1000 for r in in_window]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["latency", "throughput"])
    ap.add_argument("--url", action="append", required=True, help="a replica (repeat for more)")
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--org", default="default")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--engine-binary", required=True)
    ap.add_argument("--engine-log")
    ap.add_argument("--stack", default="bench")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup-runs", type=int, default=5)
    ap.add_argument("--gap-ms", type=float, default=50)
    ap.add_argument("--poll-ms", type=float, default=5)
    ap.add_argument("--slots", type=int, default=8)
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
    except runs.ApiError as e:
        sys.exit(f"scale/drive.py {args.mode}: {e}")
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
