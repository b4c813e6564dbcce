#!/usr/bin/env python3
"""The end-to-end side of bench/vcs.sh: the monorepo, the stacks, the signed webhooks.

Standard library only. Subcommands:

  repo LAYOUT_DIR GIT_DIR --pushes N --commits FILE
      Creates the bare repository GIT_DIR with N+1 commits on main through one
      `git fast-import` stream (one pack, no loose objects, deterministic ids), and writes
      their ids to FILE, one a line. Commit 0, the base: every stack folder (main.tf,
      variables.tf), every shared module (main.tf, variables.tf, outputs.tf, versions.tf),
      every team environment folder (terraform.tfvars) and a README. Commit i (1..N):
      rewrites or creates exactly the files of push-a.txt (odd i) or push-b.txt (even i)
      with content naming i, so `git diff --name-only` from commit i-1 to i is exactly
      that push's file list.

  store DB
      Prints the store's logical size in bytes (WAL included) and its row counts.

  seed --url URL --token-file F --layout DIR [--workers 16]
      Creates the stacks of LAYOUT_DIR/stacks.tsv (`github:acme/mono`, branch main, path
      and watch paths) through POST /api/v1/orgs/default/stacks from a thread pool with
      one keep-alive connection per thread, then pages through the list to check them.

  deliver --url URL --secret-file F --layout DIR --server-pid PID --commits FILE
          --source REPO --remote BARE_REPO --floor-dir DIR [--breakdown-rounds 10]
      Delivers signed GitHub webhooks on one keep-alive connection, one at a time. FILE
      lists the commits: base, then C1 … CN (odd ones push a, even ones push b). Before
      each push delivery (untimed) the driver pushes the next commit from REPO to main of
      BARE_REPO, the remote the server's mirror fetches from over HTTP, so every fetch
      brings one real new commit. Each push reply must trigger exactly the stacks of
      triggered-<a|b>.txt and ignore the rest; after each push the driver runs the server
      mirror's git commands against a mirror of its own of the same remote and times
      them (the git floor).
      Delivery 1 (C0..C1) is the cold one: the server clones its mirror. Then phase 1:
      push deliveries only (all but the last BREAKDOWN commits) — the headline figures.
      Phase 2, BREAKDOWN rounds of: a push, a tag push (a decision per stack recorded; no
      git, no routing), a redelivery of that push (same X-GitHub-Delivery: recorded as a
      duplicate, with a duplicate decision per stack), a pull request `closed` (each
      stack's open proposed runs looked up, and a decision per stack recorded) and a ping.
      Prints one JSON object on stdout.
"""

import argparse
import hashlib
import hmac
import http.client
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

REPO_FULL_NAME = "acme/mono"
REPOSITORY = "github:acme/mono"
ZERO = "0" * 40
CLK_TCK = os.sysconf("SC_CLK_TCK")
MODULE_FILES = ["main.tf", "variables.tf", "outputs.tf", "versions.tf"]


def read_stacks(layout):
    stacks = []
    with open(os.path.join(layout, "stacks.tsv")) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts and parts[0]:
                stacks.append({"id": parts[0], "path": parts[1], "watch_paths": parts[2:]})
    return stacks


def read_lines(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


# --- repo -----------------------------------------------------------------------------


def cmd_repo(args):
    stacks = read_stacks(args.layout)
    push_files = {k: read_lines(os.path.join(args.layout, f"push-{k}.txt")) for k in "ab"}
    env = dict(os.environ, GIT_DIR=args.git_dir)
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", args.git_dir],
                   check=True, stdout=subprocess.DEVNULL)
    marks = args.git_dir + ".marks"
    fi = subprocess.Popen(["git", "fast-import", "--quiet", f"--export-marks={marks}"],
                          env=env, stdin=subprocess.PIPE)
    out = fi.stdin

    def data(text):
        b = text.encode()
        out.write(b"data %d\n" % len(b))
        out.write(b)
        out.write(b"\n")

    def commit(i, message, files):
        out.write(b"commit refs/heads/main\nmark :%d\n" % (i + 1))
        out.write(b"committer bench <bench@bosun.invalid> %d +0000\n" % (1764460800 + i * 60))
        data(message)
        for path, text in files:
            out.write(b"M 100644 inline %s\n" % path.encode())
            data(text)

    base = []
    modules, envs = set(), set()
    for s in stacks:
        module, env_dir = s["watch_paths"][0], s["watch_paths"][1]
        base.append((f"{s['path']}/main.tf",
                     f'module "svc" {{\n  source = "../../../../{module}"\n}}\n'))
        base.append((f"{s['path']}/variables.tf", f'# {s["id"]}\nvariable "region" {{}}\n'))
        modules.add(module)
        envs.add(env_dir)
    for m in sorted(modules):
        base.extend((f"{m}/{f}", f"# {m}/{f}: base\n") for f in MODULE_FILES)
    base.extend((f"{e}/terraform.tfvars", f"# {e}: base\n") for e in sorted(envs))
    base.append(("README.md", "# acme/mono (bench/vcs.sh)\n"))
    commit(0, f"base: {len(stacks)} stacks\n", base)
    for i in range(1, args.pushes + 1):
        which = "a" if i % 2 else "b"
        files = push_files[which]
        commit(i, f"push {i} ({which}): {len(files)} files\n",
               [(rel, f"# {rel}: push {which}, commit {i}\n") for rel in files])
    out.close()
    if fi.wait() != 0:
        raise RuntimeError("git fast-import failed")
    ids = {}
    with open(marks) as f:
        for line in f:
            mark, sha = line.split()
            ids[int(mark[1:])] = sha
    with open(args.commits, "w") as f:
        for i in range(args.pushes + 1):
            f.write(ids[i + 1] + "\n")
    print(f"    {len(base)} files in the base commit, {args.pushes} pushes of "
          f"{len(push_files['a'])} / {len(push_files['b'])} files", file=sys.stderr)


# --- store -----------------------------------------------------------------------------


def cmd_store(args):
    """The store's logical size (WAL included) and row counts, read-only."""
    import sqlite3

    c = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True, timeout=30)
    try:
        page_count = c.execute("PRAGMA page_count").fetchone()[0]
        page_size = c.execute("PRAGMA page_size").fetchone()[0]
        rows = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("stacks", "deliveries", "trigger_decisions", "runs", "audit_log")}
    finally:
        c.close()
    print(json.dumps({"bytes": page_count * page_size, "rows": rows}))


# --- HTTP ---------------------------------------------------------------------------


class Client:
    """One keep-alive connection per thread."""

    def __init__(self, url, headers):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.headers = headers
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=120)
            self.local.conn = c
        return c

    def request(self, method, path, data=None, headers=None):
        h = dict(self.headers)
        h.update(headers or {})
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=h)
                r = c.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def cmd_seed(args):
    with open(args.token_file) as f:
        token = f.read().strip()
    client = Client(args.url, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    base = f"/api/v1/orgs/{args.org}/stacks"
    stacks = read_stacks(args.layout)

    def create(s):
        body = {"id": s["id"], "repository": REPOSITORY, "branch": "main", "path": s["path"],
                "watch_paths": s["watch_paths"]}
        status, reply = client.request("POST", base, json.dumps(body).encode())
        if status != 201:
            raise RuntimeError(f"POST {s['id']}: HTTP {status}: {reply[:300]!r}")

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        list(pool.map(create, stacks, chunksize=64))
    elapsed = time.monotonic() - t0

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
    if seen != len(stacks):
        raise RuntimeError(f"expected {len(stacks)} stacks after seeding, list returned {seen}")
    print(f"    created {len(stacks)} stacks in {elapsed:.1f}s "
          f"({len(stacks) / elapsed:.0f}/s, {args.workers} workers)", file=sys.stderr)
    print(json.dumps({"stacks": len(stacks), "seconds": round(elapsed, 2), "workers": args.workers}))


# --- deliveries -----------------------------------------------------------------------


def proc_ticks(pid):
    """(own utime+stime, reaped children's cutime+cstime) in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): utime 14, stime 15, cutime 16, cstime 17.
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def proc_io(pid):
    """(rchar, wchar): bytes the process read and wrote through syscalls (files, sockets)."""
    out = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v)
    return out["rchar"], out["wchar"]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(values, q):
    """Nearest-rank percentile."""
    v = sorted(values)
    if not v:
        return None
    return v[max(1, min(len(v), math.ceil(q * len(v)))) - 1]


def summary(ms):
    if not ms:
        return None
    return {"n": len(ms), "p50": round(pct(ms, 0.50), 2), "p90": round(pct(ms, 0.90), 2),
            "p99": round(pct(ms, 0.99), 2), "max": round(max(ms), 2),
            "mean": round(sum(ms) / len(ms), 2)}


class GitFloor:
    """The server mirror's git commands, run directly against a mirror of our own."""

    ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false"}

    def __init__(self, root, url):
        os.makedirs(root, exist_ok=True)
        self.dir = os.path.join(root, "mirror.git")
        self.url = url
        self.env = dict(os.environ)
        self.env.update(self.ENV)
        self.env["GIT_DIR"] = self.dir

    def git(self, *args, cwd=None):
        r = subprocess.run(["git", *args], cwd=cwd or self.dir, env=self.env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def changed(self, before, after):
        """Times what the server's mirror does for a push; returns (ms, files)."""
        t0 = time.perf_counter()
        if not os.path.exists(os.path.join(self.dir, "HEAD")):
            env = dict(self.env)
            env.pop("GIT_DIR")
            subprocess.run(["git", "init", "--quiet", "--bare", self.dir], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            self.git("config", "remote.origin.url", self.url)
        self.git("fetch", "--quiet", "--prune", "--no-tags", "origin", "+refs/heads/*:refs/heads/*")
        self.git("cat-file", "-e", f"{after}^{{commit}}")
        self.git("cat-file", "-e", f"{before}^{{commit}}")
        out = self.git("diff", "--name-only", "--no-renames", before, after)
        ms = (time.perf_counter() - t0) * 1000
        return ms, sorted({line.strip() for line in out.splitlines() if line.strip()})


def quarter_p50s(v):
    """p50 of the first and of the last quarter of a series (how it moved as the store grew)."""
    q = max(1, len(v) // 4)
    return [round(pct(v[:q], 0.5), 2), round(pct(v[-q:], 0.5), 2)]


def machine_ticks():
    """(busy, total) clock ticks of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def ours_ticks(pids):
    """Ticks used so far by this driver (and its reaped children: the git floor) and by
    the given processes (and their reaped children: the server's git)."""
    t = os.times()
    total = round((t.user + t.system + t.children_user + t.children_system) * CLK_TCK)
    for pid in pids:
        own, kids = proc_ticks(pid)
        total += own + kids
    return total


def server_status(pid):
    keep = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads")
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keep:
                out[k] = int(v.split()[0])
    return out


def cmd_deliver(args):
    with open(args.secret_file, "rb") as f:
        secret = f.read().strip()
    stacks = read_stacks(args.layout)
    n_stacks = len(stacks)
    expected = {k: set(read_lines(os.path.join(args.layout, f"triggered-{k}.txt"))) for k in "ab"}
    files = {k: read_lines(os.path.join(args.layout, f"push-{k}.txt")) for k in "ab"}
    commits = read_lines(args.commits)
    n_pushes = len(commits) - 1 - args.breakdown_rounds
    if n_pushes < 2:
        raise RuntimeError("--commits needs the base, at least two pushes and the breakdown rounds")
    client = Client(args.url, {"Content-Type": "application/json",
                               "User-Agent": "GitHub-Hookshot/bosun-bench"})
    floor = GitFloor(args.floor_dir, args.clone_url)
    pid = args.server_pid

    kinds = ["push", "floor", "bd_push", "bd_floor", "tag", "redelivery", "pr_closed", "ping"]
    samples = {k: [] for k in kinds}  # ms
    cpu = {k: [0, 0] for k in kinds}  # server's own ticks, its reaped (git) children's ticks
    written = {k: [] for k in kinds}  # bytes the server wrote per delivery (write syscalls)
    read = {k: [] for k in kinds}  # bytes the server read per delivery (read syscalls)
    rss = []  # after each delivery round
    last_push = {}

    def advance_remote(i):
        """Untimed: the remote's main moves to commit i, as a developer's push would."""
        for cmd in (["git", "-C", args.source, "push", "--quiet", "--force", args.remote,
                     f"{commits[i]}:refs/heads/main"],
                    ["git", "-C", args.remote, "update-server-info"]):
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")

    def deliver(kind, event, payload, guid=None):
        body = json.dumps(payload, separators=(",", ":")).encode()
        sig = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        guid = guid or str(uuid.uuid4())
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": guid, "X-Hub-Signature-256": sig}
        own0, kids0 = proc_ticks(pid)
        io0 = proc_io(pid)
        t0 = time.perf_counter()
        status, reply = client.request("POST", "/webhooks/github", body, headers)
        ms = (time.perf_counter() - t0) * 1000
        own1, kids1 = proc_ticks(pid)
        io1 = proc_io(pid)
        if status != 200:
            raise RuntimeError(f"{kind} delivery: HTTP {status}: {reply[:500]!r}")
        if kind is not None:
            samples[kind].append(ms)
            cpu[kind][0] += own1 - own0
            cpu[kind][1] += kids1 - kids0
            written[kind].append(io1[1] - io0[1])
            read[kind].append(io1[0] - io0[0])
        return ms, json.loads(reply), guid

    def push(i, kind, floor_kind):
        """Delivers commit i (untimed remote update first), checks the reply, then times the
        git floor for the same range."""
        which = "a" if i % 2 else "b"
        before, after = commits[i - 1], commits[i]
        advance_remote(i)
        payload = {
            "ref": "refs/heads/main", "before": before, "after": after,
            "created": False, "deleted": False, "forced": False, "base_ref": None,
            "compare": f"https://github.com/{REPO_FULL_NAME}/compare/{before[:12]}...{after[:12]}",
            "commits": [], "head_commit": None,
            "repository": {"id": 1, "name": "mono", "full_name": REPO_FULL_NAME, "private": True,
                           "default_branch": "main", "owner": {"login": "acme"}},
            "pusher": {"name": "bench", "email": "bench@bosun.invalid"},
            "sender": {"login": "bench", "id": 1, "type": "User"},
        }
        ms, reply, guid = deliver(kind, "push", payload)
        last_push.update(guid=guid, payload=payload)
        got = {t["stack"] for t in reply.get("triggered", [])}
        if got != expected[which]:
            raise RuntimeError(
                f"push {i} ({which}): triggered {len(got)} stacks, expected {len(expected[which])} "
                f"({len(got - expected[which])} unexpected, {len(expected[which] - got)} missing); "
                f"summary: {reply.get('summary')!r}")
        if reply.get("ignored") != n_stacks - len(got):
            raise RuntimeError(f"push {i}: ignored {reply.get('ignored')}, expected {n_stacks - len(got)}")
        fms, changed = floor.changed(before, after)
        if changed != files[which]:
            raise RuntimeError(f"git floor: commit {i} diff gives {len(changed)} files, "
                               f"expected {len(files[which])}")
        if floor_kind:
            samples[floor_kind].append(fms)
        return ms, fms

    # Cold: the server clones its mirror (and so does the floor's).
    own0, kids0 = proc_ticks(pid)
    ms, fms = push(1, None, None)
    own1, kids1 = proc_ticks(pid)
    cold = {"ms": round(ms, 2), "server_cpu_ms": round((own1 - own0) * 1000 / CLK_TCK, 1),
            "git_cpu_ms": round((kids1 - kids0) * 1000 / CLK_TCK, 1), "git_floor_ms": round(fms, 2)}
    print(f"    cold push (the server clones its mirror): {ms:.0f} ms; git floor {fms:.0f} ms",
          file=sys.stderr)

    # Phase 1: pushes only, as a repository's history would have them.
    t_start = time.monotonic()
    m0, ours0 = machine_ticks(), ours_ticks([pid, args.http_pid])
    warm = n_pushes - 1
    for i in range(2, n_pushes + 1):
        push(i, "push", "floor")
        rss.append(rss_kib(pid))
        done = i - 1
        if done % 10 == 0 or done == warm:
            print(f"    {done}/{warm} warm pushes: p50 so far {pct(samples['push'], 0.5):.0f} ms "
                  f"(git floor {pct(samples['floor'], 0.5):.0f} ms), last {samples['push'][-1]:.0f} ms",
                  file=sys.stderr)
    rss_after_pushes = rss_kib(pid)

    # Phase 2: the breakdown. Each round: a push, then deliveries that do part of its work.
    tag_payload = {
        "ref": "refs/tags/v1.0.0", "before": ZERO, "after": commits[1], "created": True,
        "deleted": False, "forced": False, "base_ref": "refs/heads/main", "commits": [],
        "repository": {"id": 1, "name": "mono", "full_name": REPO_FULL_NAME},
        "sender": {"login": "bench", "id": 1, "type": "User"},
    }
    closed_payload = {
        "action": "closed", "number": 7,
        "pull_request": {"number": 7, "state": "closed", "merged": False,
                         "head": {"ref": "feature/x", "sha": commits[2]},
                         "base": {"ref": "main", "sha": commits[1]}},
        "repository": {"id": 1, "name": "mono", "full_name": REPO_FULL_NAME},
        "sender": {"login": "bench", "id": 1, "type": "User"},
    }
    ping_payload = {"zen": "Keep it logically awesome.", "hook_id": 1,
                    "hook": {"type": "Repository", "events": ["push", "pull_request"]},
                    "repository": {"id": 1, "name": "mono", "full_name": REPO_FULL_NAME},
                    "sender": {"login": "bench", "id": 1, "type": "User"}}

    def check_tag(reply):
        if reply.get("triggered") or reply.get("ignored") != n_stacks:
            raise RuntimeError(f"tag push: expected nothing triggered and {n_stacks} ignored, got "
                               f"{len(reply.get('triggered') or [])} / {reply.get('ignored')}")

    def check_duplicate(reply):
        if not reply.get("duplicate") or reply.get("triggered"):
            raise RuntimeError(f"redelivery: not recorded as a duplicate: {reply!r:.300}")

    def check_closed(reply):
        if reply.get("triggered") or reply.get("canceled"):
            raise RuntimeError(f"pull request closed: triggered or canceled something: {reply!r:.300}")

    def check_ping(reply):
        if reply.get("triggered"):
            raise RuntimeError("ping: triggered something")

    for r in range(args.breakdown_rounds):
        push(n_pushes + 1 + r, "bd_push", "bd_floor")
        for kind, event, payload, guid, check in (
                ("tag", "push", tag_payload, None, check_tag),
                ("redelivery", "push", last_push["payload"], last_push["guid"], check_duplicate),
                ("pr_closed", "pull_request", closed_payload, None, check_closed),
                ("ping", "ping", ping_payload, None, check_ping)):
            _, reply, _ = deliver(kind, event, payload, guid)
            check(reply)
        rss.append(rss_kib(pid))
    if args.breakdown_rounds:
        print(f"    {args.breakdown_rounds} breakdown rounds: p50 push {pct(samples['bd_push'], 0.5):.0f} ms, "
              f"git floor {pct(samples['bd_floor'], 0.5):.0f} ms, tag push {pct(samples['tag'], 0.5):.0f} ms, "
              f"redelivery {pct(samples['redelivery'], 0.5):.0f} ms, "
              f"PR closed {pct(samples['pr_closed'], 0.5):.0f} ms, ping {pct(samples['ping'], 0.5):.1f} ms",
              file=sys.stderr)
    elapsed = time.monotonic() - t_start
    m1, ours1 = machine_ticks(), ours_ticks([pid, args.http_pid])
    window = max(1, m1[1] - m0[1])
    busy_pct = round((m1[0] - m0[0]) * 100 / window, 1)
    others_pct = round(max(0, (m1[0] - m0[0]) - (ours1 - ours0)) * 100 / window, 1)

    out = {
        "stacks": n_stacks,
        "files": len(files["a"]),
        "triggered": {"a": len(expected["a"]), "b": len(expected["b"])},
        "pushes": n_pushes,
        "breakdown_rounds": args.breakdown_rounds,
        "cold_push": cold,
        "ms": {k: summary(v) for k, v in samples.items() if v},
        "trend_ms": {k: quarter_p50s(v) for k, v in samples.items() if v},
        "server_cpu_ms": {k: round(cpu[k][0] * 1000 / CLK_TCK / len(samples[k]), 1)
                          for k in kinds if samples[k] and not k.endswith("floor")},
        "git_cpu_ms": {k: round(cpu[k][1] * 1000 / CLK_TCK / len(samples[k]), 1)
                       for k in kinds if samples[k] and not k.endswith("floor")},
        # Bytes the server wrote / read per delivery (write / read syscalls: SQLite's WAL,
        # checkpoints and page reads, the socket), MiB: the mean, and p50 of the first and
        # the last quarter.
        "written_mib": {k: {"mean": round(sum(v) / len(v) / 2**20, 2),
                            "first": round(quarter_p50s(v)[0] / 2**20, 2),
                            "last": round(quarter_p50s(v)[1] / 2**20, 2)}
                        for k, v in written.items() if v},
        "read_mib": {k: {"mean": round(sum(v) / len(v) / 2**20, 2),
                         "first": round(quarter_p50s(v)[0] / 2**20, 2),
                         "last": round(quarter_p50s(v)[1] / 2**20, 2)}
                     for k, v in read.items() if v},
        "rss_kib": {"after_cold": rss[0] if rss else None, "after_pushes": rss_after_pushes,
                    "end": rss[-1] if rss else None, "peak": max(rss) if rss else None},
        "server_status_end": server_status(pid),
        "raw_ms": {k: [round(x, 2) for x in v] for k, v in samples.items()},
        "seconds": round(elapsed, 1),
        # The machine during the warm deliveries: busy share, and the part of it used by
        # processes other than the server, the HTTP remote and this driver with its git.
        "machine_busy_pct": busy_pct,
        "others_busy_pct": others_pct,
    }
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("repo")
    r.add_argument("layout")
    r.add_argument("git_dir")
    r.add_argument("--pushes", type=int, required=True)
    r.add_argument("--commits", required=True)
    st = sub.add_parser("store")
    st.add_argument("db")
    s = sub.add_parser("seed")
    s.add_argument("--url", required=True)
    s.add_argument("--token-file", required=True)
    s.add_argument("--layout", required=True)
    s.add_argument("--org", default="default")
    s.add_argument("--workers", type=int, default=16)
    d = sub.add_parser("deliver")
    d.add_argument("--url", required=True)
    d.add_argument("--secret-file", required=True)
    d.add_argument("--layout", required=True)
    d.add_argument("--server-pid", type=int, required=True)
    d.add_argument("--clone-url", required=True)
    d.add_argument("--commits", required=True)
    d.add_argument("--source", required=True)
    d.add_argument("--remote", required=True)
    d.add_argument("--floor-dir", required=True)
    d.add_argument("--breakdown-rounds", type=int, default=10)
    d.add_argument("--http-pid", type=int, required=True)
    args = ap.parse_args()
    {"repo": cmd_repo, "store": cmd_store, "seed": cmd_seed, "deliver": cmd_deliver}[args.cmd](args)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - report and fail
        print(f"vcs/drive.py: {e}", file=sys.stderr)
        sys.exit(1)
