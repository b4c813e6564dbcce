#!/usr/bin/env python3
"""Dispatch latency on a seeded store, for bench/size.sh.

Standard library only; reuses bench/runs/drive.py's client and statistics. With an admin
token it makes a runner pool of its own (`size-dispatch`: a pool token, one registered
runner and one stack in that pool, so the seeded store's queued runs — in other pools —
are never what it leases but are what every lease looks past), then, per run: the runner's
long-poll lease is sent and waits on the server, a proposed run of the probe stack is
created (alternating between the `--create-url`s: with two replicas half the runs are
created on the replica the runner does not wait on), and dispatch is the time from
sending the create to the lease answering with that run. The run is then failed through
the runner protocol so the next one may start. Prints one JSON document on stdout.

Usage: dispatch.py --url RUNNER_URL [--create-url URL]... --token-file FILE
                   [--org default] [--runs 100] [--warmup 5]
"""

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runs"))
import drive as runs  # noqa: E402  (bench/runs/drive.py)

POOL = "size-dispatch"
STACK = "size-dispatch-probe"
# How long the lease thread is given to reach the server before the run is created: the
# run must find the runner already waiting, as an idle runner is.
LEASE_HEAD_START = 0.05


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True, help="the replica the runner long-polls")
    p.add_argument("--create-url", action="append", default=[], help="where runs are created (repeatable)")
    p.add_argument("--token-file", required=True)
    p.add_argument("--org", default="default")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    token = open(a.token_file).read().strip()
    admin = runs.Client(a.url, token)
    creators = [runs.Client(u, token) for u in (a.create_url or [a.url])]
    pool_token = admin.request(
        "POST", f"/api/v1/orgs/{a.org}/pool-tokens", {"pool": POOL, "description": "size.sh dispatch probe"}
    )["secret"]
    runner = runs.Client(a.url, pool_token)
    runner_id = runner.request("POST", "/api/v1/runner/register", {"name": "size-dispatch", "version": "bench"})[
        "runner_id"
    ]
    admin.request(
        "POST",
        f"/api/v1/orgs/{a.org}/stacks",
        {"id": STACK, "repository": "file:///srv/git/size-dispatch", "runner_pool": POOL},
    )
    dispatch, create = [], []
    t_begin = time.time()
    for i in range(a.warmup + a.runs):
        answer = {}

        def lease():
            answer["lease"] = runner.request(
                "POST", "/api/v1/runner/lease", {"runner_id": runner_id, "wait_seconds": 30}
            )
            answer["at"] = time.monotonic()

        waiting = threading.Thread(target=lease)
        waiting.start()
        time.sleep(LEASE_HEAD_START)
        c = creators[i % len(creators)]
        t0 = time.monotonic()
        run = c.request("POST", f"/api/v1/orgs/{a.org}/stacks/{STACK}/runs", {"kind": "proposed"})
        t1 = time.monotonic()
        waiting.join()
        leased = answer.get("lease")
        if not leased or leased.get("run_id") != run["id"]:
            sys.exit(f"dispatch.py: run {run['id']} was not the lease's answer: {leased!r}")
        runner.request(
            "POST",
            f"/api/v1/runner/runs/{run['id']}/report",
            {"fencing": leased["fencing"], "event": "failed", "reason": "size.sh dispatch probe"},
        )
        if i >= a.warmup:
            dispatch.append((answer["at"] - t0) * 1000)
            create.append((t1 - t0) * 1000)
    json.dump(
        {
            "runs": len(dispatch),
            "create_urls": len(creators),
            "seconds": round(time.time() - t_begin, 2),
            "dispatch_ms": runs.stats(dispatch),
            "create_ms": runs.stats(create),
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
