#!/usr/bin/env python3
"""Seed a running `bosun server` with N stacks through the public API.

Standard library only. POSTs run on a thread pool, each worker thread keeping one
keep-alive HTTP connection. Ids are deterministic (`stack-00000` .. `stack-NNNNN`) so
bench/show.lua can pick among them without a shared id file.

Field mix (roughly): every 2nd stack sets `path`, every 3rd `watch_paths`, every 4th
`variables` (one a secret:// reference), every 5th the terraform engine with a version pin,
every 7th an `environment`, every 10th `drift_detection`; tiers and repositories rotate.
The last 5% are created after the rest and each depends on an earlier stack, so the
dependency table is not empty either.

After seeding it pages through the list endpoint and checks that exactly N stacks exist.
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

ENVS = ["dev", "staging", "prod"]
TIERS = ["small", "medium", "large"]
REGIONS = ["eu-west-1", "us-east-1", "ap-southeast-2"]


def stack_id(i):
    return f"stack-{i:05d}"


def stack_body(i, n_first):
    env = ENVS[i % len(ENVS)]
    body = {
        "id": stack_id(i),
        "repository": "github:acme/infra" if i % 4 else f"github:acme/platform-{i % 20}",
        "tier": TIERS[i % len(TIERS)],
    }
    if i % 2 == 0:
        body["path"] = f"envs/{env}/svc-{i % 50:02d}"
    if i % 3 == 0:
        body["watch_paths"] = ["modules/network", f"modules/svc-{i % 50:02d}", f"envs/{env}"]
    if i % 4 == 0:
        body["variables"] = {
            "REGION": REGIONS[i % len(REGIONS)],
            "INSTANCE_COUNT": str(1 + i % 7),
            "DB_PASSWORD": f"secret://{env}/db-password",
        }
    if i % 5 == 0:
        body["engine"] = "terraform"
        body["engine_version"] = "1.8.2"
    if i % 7 == 0:
        body["environment"] = env
        body["name"] = f"Service {i % 50} ({env})"
    if i % 10 == 0:
        body["drift_detection"] = {"schedule": f"{i % 60} 3 * * *", "reconcile": i % 20 == 0}
    if i % 11 == 0:
        body["autodeploy"] = True
        body["branch"] = "release"
    if i >= n_first:
        # Depends on an earlier stack (created in the first phase).
        body["depends_on"] = [{"stack": stack_id(i - n_first), "outputs": {"vpc_id": "vpc_id"}}]
    return body


class Client:
    """One keep-alive connection per worker thread."""

    def __init__(self, host, port, token):
        self.host, self.port = host, port
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        }
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.local.conn = c
        return c

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=self.headers)
                r = c.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--org", default="default")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args()

    u = urllib.parse.urlsplit(args.url)
    with open(args.token_file) as f:
        token = f.read().strip()
    client = Client(u.hostname, u.port, token)
    base = f"/api/v1/orgs/{args.org}/stacks"

    n = args.count
    n_first = n - n // 20  # the last 5% depend on earlier stacks

    def create(i):
        status, body = client.request("POST", base, stack_body(i, n_first))
        if status != 201:
            raise RuntimeError(f"POST {stack_id(i)}: HTTP {status}: {body[:300]!r}")

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        # list() re-raises the first failure.
        list(pool.map(create, range(n_first), chunksize=64))
        list(pool.map(create, range(n_first, n), chunksize=16))
    elapsed = time.monotonic() - t0

    # Verify: page through the whole list.
    seen, cursor = 0, None
    while True:
        q = {"limit": "1000"}
        if cursor:
            q["cursor"] = cursor
        status, body = client.request("GET", f"{base}?{urllib.parse.urlencode(q)}")
        if status != 200:
            raise RuntimeError(f"GET list: HTTP {status}: {body[:300]!r}")
        page = json.loads(body)
        seen += len(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    if seen != n:
        raise RuntimeError(f"expected {n} stacks after seeding, list returned {seen}")

    print(
        f"seeded {n} stacks in {elapsed:.1f}s ({n / elapsed:.0f} creates/s, "
        f"{args.workers} workers); list check: {seen} stacks",
        file=sys.stderr,
    )
    # Machine-readable summary on stdout for stacks.sh.
    print(json.dumps({"stacks": n, "seconds": round(elapsed, 2), "workers": args.workers}))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - report and fail
        print(f"seed.py: {e}", file=sys.stderr)
        sys.exit(1)
