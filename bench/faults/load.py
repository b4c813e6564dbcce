#!/usr/bin/env python3
"""The load of bench/faults.sh: tracked runs kept going on every stack, and a watch on
the stacks' state versions. Standard library only.

One thread per stack loops: wait until the stack's newest run has ended, set the stack's
variable TF_VAR_n to a new value (so the apply changes an output and writes a new state
version), start a tracked run (the stacks autodeploy: plan, then apply). The server and
the database go away and come back under it, so every request may fail: a failed request
is tried again a second later, and a run start whose answer was lost is found by looking
at the stack's newest run before starting another (a stack never has two runs at once).

One more thread lists every stack's state versions about once a second and appends each
(stack, version, checksum) it sees for the first time to versions.jsonl, with what it
saw about it: these are the versions the API acknowledged during the load. A version seen
again with another checksum is appended again (it must never happen: versions are
immutable).

Stops starting runs when --stop-file exists; stops watching (after one last pass) when
--stop-watch-file exists.
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

TERMINAL = {"finished", "failed", "discarded", "canceled", "interrupted", "force_failed", "skipped"}


class Client:
    """One keep-alive connection; every failure (refused, reset, timeout, HTTP >= 300) is
    None, since during the load all of them are expected."""

    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self.conn = None
        self.last_error = None

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=15)
            self.conn.request(method, path, body=data, headers=self.headers)
            resp = self.conn.getresponse()
            raw = resp.read()
        except (http.client.HTTPException, OSError) as e:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            self.last_error = f"{method} {path}: {type(e).__name__}: {e}"
            return None
        if resp.status >= 300:
            self.last_error = f"{method} {path}: HTTP {resp.status}: {raw[:200]!r}"
            return None
        return json.loads(raw) if raw else {}


def now_ms():
    return int(time.time() * 1000)


class Log:
    """An append-only JSON-lines file shared by threads."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, rec):
        with self.lock:
            self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")


def drive_stack(args, token, stack, runs_log, errors):
    c = Client(args.url, token)
    base = f"/api/v1/orgs/{args.org}/stacks/{stack}"
    n = 0
    while not os.path.exists(args.stop_file):
        page = c.request("GET", f"{base}/runs?limit=1")
        if page is None:
            errors[stack] += 1
            time.sleep(1)
            continue
        items = page.get("items", [])
        if items and items[0]["state"] not in TERMINAL:
            time.sleep(1)  # the stack's run is still going (or its start's answer was lost)
            continue
        n += 1
        value = f"{stack}-{n}-{now_ms()}"
        if c.request("PATCH", base, {"variables": {"TF_VAR_n": value}}) is None:
            errors[stack] += 1
            time.sleep(1)
            continue
        t = now_ms()
        run = c.request("POST", f"{base}/runs", {"kind": "tracked"})
        if run is None:
            # Maybe started, maybe not: the next look at the newest run tells.
            errors[stack] += 1
            runs_log.write({"t": t, "stack": stack, "run": None, "n": value, "error": c.last_error})
            time.sleep(1)
            continue
        runs_log.write({"t": t, "stack": stack, "run": run["id"], "n": value})


def list_versions(c, org, stack):
    """The newest page (100) of a stack's versions, or None. A poll a second is far more
    often than a stack gets 100 new versions, so the first page sees every version."""
    page = c.request("GET", f"/api/v1/orgs/{org}/stacks/{stack}/state/versions?limit=100")
    return None if page is None else page.get("items", [])


def watch(args, token, stacks, versions_log, status):
    c = Client(args.url, token)
    seen = {}  # (stack, version) -> checksum
    last = False
    while True:
        if os.path.exists(args.stop_watch_file):
            last = True  # one more pass, then stop
        t0 = time.monotonic()
        ok = 0
        for stack in stacks:
            items = list_versions(c, args.org, stack)
            if items is None:
                continue
            ok += 1
            for v in items:
                key = (stack, v["version"])
                if seen.get(key) == v["checksum"]:
                    continue
                changed = key in seen
                seen[key] = v["checksum"]
                versions_log.write({
                    "t": now_ms(), "stack": stack, "version": v["version"], "serial": v["serial"],
                    "checksum": v["checksum"], "writer": v["writer"], "late_write": v["late_write"],
                    "forced": v["forced"], "recovered": v.get("recovered"),
                    "created_at": v["created_at"], "checksum_changed": changed,
                })
        status["polls"] += 1
        status["ok_polls"] += ok == len(stacks)
        if last:
            return
        time.sleep(max(0.0, args.poll - (time.monotonic() - t0)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--org", default="default")
    p.add_argument("--stacks", required=True, help="comma-separated stack ids")
    p.add_argument("--out-dir", required=True, help="runs.jsonl, versions.jsonl, load.json go here")
    p.add_argument("--stop-file", required=True)
    p.add_argument("--stop-watch-file", required=True)
    p.add_argument("--poll", type=float, default=1.0, help="seconds between version polls")
    args = p.parse_args()
    with open(args.token_file) as f:
        token = f.read().strip()
    stacks = args.stacks.split(",")
    runs_log = Log(os.path.join(args.out_dir, "runs.jsonl"))
    versions_log = Log(os.path.join(args.out_dir, "versions.jsonl"))
    errors = {s: 0 for s in stacks}
    status = {"polls": 0, "ok_polls": 0}

    drivers = [threading.Thread(target=drive_stack, args=(args, token, s, runs_log, errors), daemon=True)
               for s in stacks]
    watcher = threading.Thread(target=watch, args=(args, token, stacks, versions_log, status), daemon=True)
    watcher.start()
    for t in drivers:
        t.start()
    for t in drivers:
        t.join()
    watcher.join()
    with open(os.path.join(args.out_dir, "load.json"), "w") as f:
        json.dump({"failed_requests": errors, **status}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
