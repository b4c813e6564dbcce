#!/usr/bin/env python3
"""Terraform apply driver for bench/state.sh: the same apply against Bosun's `http`
backend and against Terraform's local backend, alternated, timed per apply.

Two work dirs get the same main.tf; the Bosun one also gets a backend.tf pointing at the
stack's state URL (token through TF_HTTP_PASSWORD). Each is `terraform init`-ed once and
applied once untimed (warm-up: creates the first state, warms caches), then the timed
applies alternate Bosun, local, Bosun, local, ... with the same -var iteration=i for both.
Every apply must exit 0; afterwards both states are checked (last iteration's outputs,
one new state version per apply on Bosun, no local state file in the Bosun dir).

Prints one JSON object on stdout.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse


def die(msg):
    print(f"tf.py: {msg}", file=sys.stderr)
    sys.exit(1)


def percentile(values, p):
    """Nearest-rank percentile."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


def api_get(url, token, path):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class WorkDir:
    def __init__(self, name, root, config, terraform, extra_env):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(os.path.join(self.dir, "home"))
        shutil.copy(config, os.path.join(self.dir, "main.tf"))
        rc = os.path.join(self.dir, "terraformrc")
        open(rc, "w").close()
        self.terraform = terraform
        # A clean environment: no user CLI config, no plugin cache, no TF_LOG.
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.path.join(self.dir, "home"),
            "TF_CLI_CONFIG_FILE": rc,
            "TF_IN_AUTOMATION": "1",
            "CHECKPOINT_DISABLE": "1",
            **extra_env,
        }
        self.log = os.path.join(root, f"{name}.log")

    def run(self, args):
        """Runs terraform ARGS; returns wall seconds. Output goes to the log file."""
        with open(self.log, "ab") as log:
            log.write(f"\n$ terraform {' '.join(args)}\n".encode())
            log.flush()
            t0 = time.perf_counter()
            p = subprocess.run([self.terraform, *args], cwd=self.dir, env=self.env,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            secs = time.perf_counter() - t0
        if p.returncode != 0:
            with open(self.log, "rb") as f:
                tail = f.read()[-3000:].decode(errors="replace")
            die(f"{self.name}: terraform {' '.join(args)} exited {p.returncode}:\n{tail}")
        return secs

    def apply(self, iteration):
        return self.run(["apply", "-auto-approve", "-input=false", "-no-color",
                         "-var", f"iteration={iteration}"])


def expected_o00(iteration):
    return f"bench-{iteration}-string-0"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--terraform", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--org", default="default")
    p.add_argument("--stack", required=True)
    p.add_argument("--applies", type=int, default=20)
    args = p.parse_args()
    with open(args.token_file) as f:
        token = f.read().strip()

    state_path = f"/api/v1/orgs/{args.org}/stacks/{args.stack}/state"
    address = args.url + state_path
    bosun = WorkDir("bosun", args.work, args.config, args.terraform,
                    {"TF_HTTP_PASSWORD": token})
    with open(os.path.join(bosun.dir, "backend.tf"), "w") as f:
        f.write(f'''terraform {{
  backend "http" {{
    address        = "{address}"
    lock_address   = "{address}"
    unlock_address = "{address}"
    lock_method    = "LOCK"
    unlock_method  = "UNLOCK"
    username       = "bosun"
  }}
}}
''')
    local = WorkDir("local", args.work, args.config, args.terraform, {})

    init = {"bosun": bosun.run(["init", "-input=false", "-no-color"]),
            "local": local.run(["init", "-input=false", "-no-color"])}
    warm = {"bosun": bosun.apply(0), "local": local.apply(0)}

    def versions():
        status, data = api_get(args.url, token, state_path + "/versions?limit=1000")
        if status != 200:
            die(f"listing state versions: HTTP {status}: {data[:300]!r}")
        return len(json.loads(data)["items"])

    versions_before = versions()
    times = {"bosun": [], "local": []}
    for i in range(1, args.applies + 1):
        times["bosun"].append(bosun.apply(i))
        times["local"].append(local.apply(i))
        print(f"    apply {i:>3}/{args.applies}: bosun {times['bosun'][-1] * 1000:7.1f} ms"
              f"   local {times['local'][-1] * 1000:7.1f} ms", file=sys.stderr)
    versions_after = versions()

    # Both backends really hold the last apply's state.
    last = args.applies
    status, data = api_get(args.url, token, state_path)
    if status != 200:
        die(f"reading Bosun's state: HTTP {status}")
    remote = json.loads(data)
    if remote["outputs"]["o00"]["value"] != expected_o00(last) or len(remote["outputs"]) != 40:
        die(f"Bosun's state does not hold apply {last}'s outputs")
    if os.path.exists(os.path.join(bosun.dir, "terraform.tfstate")):
        die("the Bosun work dir has a local terraform.tfstate: the http backend was not used")
    with open(os.path.join(local.dir, "terraform.tfstate")) as f:
        localstate = json.load(f)
    if localstate["outputs"]["o00"]["value"] != expected_o00(last):
        die(f"the local state does not hold apply {last}'s outputs")
    writes = versions_after - versions_before
    if writes < args.applies:
        die(f"{writes} state versions written to Bosun in {args.applies} applies")

    def summary(ts):
        return {
            "median_ms": round(statistics.median(ts) * 1000, 1),
            "p90_ms": round(percentile(ts, 90) * 1000, 1),
            "min_ms": round(min(ts) * 1000, 1),
            "max_ms": round(max(ts) * 1000, 1),
            "mean_ms": round(statistics.fmean(ts) * 1000, 1),
            "all_ms": [round(t * 1000, 1) for t in ts],
        }

    res = {"bosun": summary(times["bosun"]), "local": summary(times["local"])}
    out = {
        "applies": args.applies,
        "outputs": len(localstate["outputs"]),
        "state_bytes": {"bosun": len(data),
                        "local": os.path.getsize(os.path.join(local.dir, "terraform.tfstate"))},
        "init_ms": {k: round(v * 1000, 1) for k, v in init.items()},
        "warmup_apply_ms": {k: round(v * 1000, 1) for k, v in warm.items()},
        "bosun": res["bosun"],
        "local": res["local"],
        "ratio_median": round(res["bosun"]["median_ms"] / res["local"]["median_ms"], 3),
        "ratio_p90": round(res["bosun"]["p90_ms"] / res["local"]["p90_ms"], 3),
        "overhead_median_ms": round(res["bosun"]["median_ms"] - res["local"]["median_ms"], 1),
        # Per-pair difference (apply i on Bosun minus apply i on local): robust to slow
        # drifts of the machine that hit both members of a pair alike.
        "paired_diff_median_ms": round(statistics.median(
            b - l for b, l in zip(times["bosun"], times["local"])) * 1000, 1),
        "bosun_state_versions_per_apply": round(writes / args.applies, 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
