#!/usr/bin/env python3
"""Load driver for Bosun's Terraform `http` state backend (bench/state.sh).

Python 3 standard library only: http.client with one keep-alive connection per thread.

  load.py ... stacks ID...        create stacks (POST /api/v1/orgs/{org}/stacks)
  load.py ... lock  --stacks A,B  LOCK then UNLOCK, in a loop, for --seconds
  load.py ... post  --stacks A,B  POST a ~--kib KiB state with increasing serial

`lock` and `post` run one thread (and one connection) per stack, so with several stacks
the threads never contend for a lock; one stack gives the single-connection serial
figure. Every response is checked (200 expected) and any other status fails the run, so
a refused lock or a rejected write cannot pass as a fast result. `post` holds the stack's
lock and writes with `?ID=<lock id>` and `Content-MD5`, as Terraform does, then reads
the state back and checks its serial and size.

Prints one JSON object on stdout: operations, seconds, per-second rates, latency
percentiles and the driver's own CPU time (so a saturated driver is visible).
"""

import argparse
import base64
import hashlib
import http.client
import json
import sys
import threading
import time
import urllib.parse
import uuid


def die(msg):
    print(f"load.py: {msg}", file=sys.stderr)
    sys.exit(1)


class Client:
    """One keep-alive connection with the admin token."""

    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.auth = f"Bearer {token}"
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        h = {"Authorization": self.auth}
        if headers:
            h.update(headers)
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.conn.request(method, path, body=body, headers=h)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                return resp.status, data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A keep-alive connection the server closed while idle: reconnect once.
                self.close()
                if attempt:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def lock_body(lock_id, path):
    return json.dumps(
        {
            "ID": lock_id,
            "Operation": "OperationTypeApply",
            "Info": "",
            "Who": "bench@bosun-bench",
            "Version": "1.0.3",
            "Created": time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime()),
            "Path": path,
        }
    ).encode()


def percentile(sorted_values, p):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * p // 100) - 1))
    return sorted_values[int(k)]


# --- state documents ----------------------------------------------------------------------

SERIAL_MARK = 987654321987


def make_state(target_bytes, lineage):
    """A Terraform v4 state of about target_bytes (indented like Terraform writes it),
    split around its serial so each write only concatenates: (prefix, suffix)."""
    outputs = {
        f"output_{i:02d}": {"value": f"value-{i}-" + "x" * 40, "type": "string"}
        for i in range(40)
    }
    doc = {
        "version": 4,
        "terraform_version": "1.0.3",
        "serial": SERIAL_MARK,
        "lineage": lineage,
        "outputs": outputs,
        "resources": [],
    }

    def instance(i):
        return {
            "index_key": i,
            "schema_version": 1,
            "attributes": {
                "ami": "ami-0c55b159cbfafe1f0",
                "arn": f"arn:aws:ec2:eu-west-1:123456789012:instance/i-{i:017x}",
                "associate_public_ip_address": False,
                "availability_zone": "eu-west-1a",
                "id": f"i-{i:017x}",
                "instance_state": "running",
                "instance_type": "t3.micro",
                "private_dns": f"ip-10-0-{i // 256}-{i % 256}.eu-west-1.compute.internal",
                "private_ip": f"10.0.{i // 256}.{i % 256}",
                "root_block_device": [
                    {"delete_on_termination": True, "encrypted": True, "iops": 3000,
                     "volume_size": 20, "volume_type": "gp3"}
                ],
                "subnet_id": "subnet-0123456789abcdef0",
                "tags": {"Name": f"web-{i}", "env": "bench", "team": "platform"},
                "vpc_security_group_ids": ["sg-0123456789abcdef0"],
            },
            "sensitive_attributes": [],
            "private": base64.b64encode(hashlib.sha256(str(i).encode()).digest() * 4).decode(),
        }

    resource = {
        "mode": "managed",
        "type": "aws_instance",
        "name": "web",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [],
    }
    doc["resources"].append(resource)
    i = 0
    while True:
        text = json.dumps(doc, indent=2)
        if len(text) >= target_bytes:
            break
        resource["instances"].append(instance(i))
        i += 1
    mark = f'"serial": {SERIAL_MARK}'
    assert text.count(mark) == 1
    prefix, suffix = text.split(mark)
    return (prefix + '"serial": ').encode(), suffix.encode()


# --- commands ----------------------------------------------------------------------------


def cmd_stacks(args, token):
    c = Client(args.url, token)
    for sid in args.ids:
        body = json.dumps({"id": sid, "repository": "github:acme/infra"}).encode()
        status, data = c.request(
            "POST", f"/api/v1/orgs/{args.org}/stacks", body,
            {"Content-Type": "application/json"},
        )
        if status != 201:
            die(f"creating stack {sid}: HTTP {status}: {data[:300]!r}")
    c.close()
    print(json.dumps({"created": len(args.ids)}))


def run_threads(args, token, stacks, setup, step, teardown):
    """One thread per stack: setup(client, stack) -> ctx; step(client, stack, ctx) ->
    bytes sent, called until the deadline; teardown(client, stack, ctx). Returns the
    summary dict."""
    n = len(stacks)
    barrier = threading.Barrier(n + 1)
    results = [None] * n
    errors = []
    start_box = {}
    go = threading.Event()

    def worker(idx, stack):
        c = Client(args.url, token)
        lat = []
        sent = 0
        try:
            ctx = setup(c, stack)
            barrier.wait()  # every connection is set up
            go.wait()
            deadline = start_box["deadline"]
            now = time.perf_counter()
            while now < deadline:
                sent += step(c, stack, ctx)
                t = time.perf_counter()
                lat.append(t - now)
                now = t
            end = now
            teardown(c, stack, ctx)
            results[idx] = (lat, sent, end)
        except BaseException as e:  # noqa: BLE001 - reported, then the run fails
            errors.append(f"{stack}: {e}")
            barrier.abort()
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i, s), daemon=True)
               for i, s in enumerate(stacks)]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    cpu0 = time.process_time()
    start = time.perf_counter()
    start_box["deadline"] = start + args.seconds
    go.set()
    for t in threads:
        t.join()
    cpu1 = time.process_time()
    if errors:
        die("; ".join(errors))
    ends = [r[2] for r in results]
    secs = max(ends) - start
    lat = sorted(x for r in results for x in r[0])
    ops = len(lat)
    sent = sum(r[1] for r in results)
    if ops == 0:
        die("no operation completed")
    return {
        "threads": n,
        "ops": ops,
        "seconds": round(secs, 3),
        "ops_per_s": round(ops / secs, 1),
        "per_thread_ops": [len(r[0]) for r in results],
        "p50_ms": round(percentile(lat, 50) * 1000, 3),
        "p90_ms": round(percentile(lat, 90) * 1000, 3),
        "p99_ms": round(percentile(lat, 99) * 1000, 3),
        "max_ms": round(lat[-1] * 1000, 3),
        "bytes_sent": sent,
        "mib_per_s": round(sent / secs / 1048576, 2),
        "driver_cpu_s": round(cpu1 - cpu0, 2),
    }


def state_path(org, stack):
    return f"/api/v1/orgs/{org}/stacks/{stack}/state"


def cmd_lock(args, token):
    def setup(c, stack):
        return {"path": state_path(args.org, stack), "n": 0}

    def step(c, stack, ctx):
        ctx["n"] += 1
        body = lock_body(str(uuid.uuid4()), ctx["path"])
        status, data = c.request("LOCK", ctx["path"], body,
                                 {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"LOCK #{ctx['n']}: HTTP {status}: {data[:300]!r}")
        status, data = c.request("UNLOCK", ctx["path"], body,
                                 {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"UNLOCK #{ctx['n']}: HTTP {status}: {data[:300]!r}")
        return 0

    def teardown(c, stack, ctx):
        status, data = c.request("GET", ctx["path"] + "/lock")
        if status != 200 or json.loads(data).get("locked") is not False:
            raise RuntimeError(f"stack still locked after the run: {status} {data[:300]!r}")

    out = run_threads(args, token, args.stacks, setup, step, teardown)
    out["cycles_per_s"] = out["ops_per_s"]
    out["requests_per_s"] = round(out["ops_per_s"] * 2, 1)
    print(json.dumps(out))


def cmd_post(args, token):
    def setup(c, stack):
        prefix, suffix = make_state(args.kib * 1024, str(uuid.uuid4()))
        path = state_path(args.org, stack)
        lock_id = str(uuid.uuid4())
        lbody = lock_body(lock_id, path)
        status, data = c.request("LOCK", path, lbody, {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"LOCK: HTTP {status}: {data[:300]!r}")
        return {"path": path, "post_path": f"{path}?ID={urllib.parse.quote(lock_id)}",
                "lock": lbody, "prefix": prefix, "suffix": suffix, "serial": 0,
                "size": 0}

    def step(c, stack, ctx):
        ctx["serial"] += 1
        body = ctx["prefix"] + str(ctx["serial"]).encode() + ctx["suffix"]
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        status, data = c.request("POST", ctx["post_path"], body,
                                 {"Content-Type": "application/json", "Content-MD5": md5})
        if status != 200:
            raise RuntimeError(f"POST serial {ctx['serial']}: HTTP {status}: {data[:300]!r}")
        ctx["size"] = len(body)
        return len(body)

    def teardown(c, stack, ctx):
        status, data = c.request("UNLOCK", ctx["path"], ctx["lock"],
                                 {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"UNLOCK: HTTP {status}: {data[:300]!r}")
        status, data = c.request("GET", ctx["path"])
        if status != 200:
            raise RuntimeError(f"GET after the run: HTTP {status}")
        got = json.loads(data)
        if got.get("serial") != ctx["serial"] or len(data) != ctx["size"]:
            raise RuntimeError(
                f"read back serial {got.get('serial')} ({len(data)} B), "
                f"expected {ctx['serial']} ({ctx['size']} B)")
        sizes.append(ctx["size"])

    sizes = []
    out = run_threads(args, token, args.stacks, setup, step, teardown)
    out["state_bytes"] = max(sizes)
    out["posts_per_s"] = out["ops_per_s"]
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--org", default="default")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stacks")
    s.add_argument("ids", nargs="+")
    for name in ("lock", "post"):
        s = sub.add_parser(name)
        s.add_argument("--stacks", required=True, type=lambda v: v.split(","))
        s.add_argument("--seconds", type=float, default=10.0)
        if name == "post":
            s.add_argument("--kib", type=int, default=100)
    args = p.parse_args()
    with open(args.token_file) as f:
        token = f.read().strip()
    {"stacks": cmd_stacks, "lock": cmd_lock, "post": cmd_post}[args.cmd](args, token)


if __name__ == "__main__":
    main()
