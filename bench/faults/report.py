#!/usr/bin/env python3
"""The end of bench/faults.sh: let the runs settle, then read what the server holds and
compare it with what the load saw. Standard library only.

  settle  waits until no run of the stacks is queued or executing, at most --timeout
          seconds; prints {"settled": bool, "seconds": s}.
  report  reads every run and every state version of the stacks, the load's
          versions.jsonl (what the API listed during the load), the driver's faults.tsv
          (what was injected when) and the settings (JSON on stdin); prints the tables and
          one JSON line; exits 1 when a run is stuck or a version was lost.

Definitions (also printed):
  acknowledged  every (stack, version, checksum) the API listed at any moment during the
                load, plus, for every run that ended applied, a version written by it;
  stored        what the API lists at the end;
  lost          acknowledged but missing at the end or with another checksum, and applied
                runs with no version of their own at the end.
"""

import argparse
import collections
import datetime
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

TERMINAL = {"finished", "failed", "discarded", "canceled", "interrupted", "force_failed", "skipped"}


class Client:
    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.conn = None

    def get(self, path, tries=30):
        """GET with retries (the server may still be catching up after the last fault)."""
        last = None
        for _ in range(tries):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                self.conn.request("GET", path, headers=self.headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                if resp.status == 200:
                    return json.loads(raw)
                last = f"HTTP {resp.status}: {raw[:200]!r}"
            except (http.client.HTTPException, OSError) as e:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                last = f"{type(e).__name__}: {e}"
            time.sleep(1)
        raise SystemExit(f"report: GET {path} kept failing: {last}")

    def all_pages(self, path):
        items, cursor = [], None
        while True:
            sep = "&" if "?" in path else "?"
            page = self.get(f"{path}{sep}limit=1000" + (f"&cursor={cursor}" if cursor else ""))
            items += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return items


def ts_ms(s):
    return int(datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1000)


def token_of(path):
    with open(path) as f:
        return f.read().strip()


# --- settle -----------------------------------------------------------------------------


def settle(args):
    c = Client(args.url, token_of(args.token_file))
    stacks = args.stacks.split(",")
    t0 = time.monotonic()
    while True:
        active = []
        for s in stacks:
            for r in c.get(f"/api/v1/orgs/{args.org}/stacks/{s}/runs?limit=20")["items"]:
                if r["state"] not in TERMINAL:
                    active.append(f"{r['id']} ({s}: {r['state']})")
        waited = time.monotonic() - t0
        if not active or waited >= args.timeout:
            print(json.dumps({"settled": not active, "seconds": round(waited, 1), "active": active}))
            return 0
        time.sleep(2)


# --- report -----------------------------------------------------------------------------


def pct(values, p):
    v = sorted(values)
    return v[max(0, -(-p * len(v) // 100) - 1)] if v else None


def fmt_s(ms):
    return "-" if ms is None else f"{ms / 1000:.1f} s"


def read_faults(path):
    events = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            events.append((int(parts[0]), parts[1], parts[2:] if len(parts) > 2 else []))
    return events


def report(args):
    settings = json.load(sys.stdin)
    c = Client(args.url, token_of(args.token_file))
    org = args.org
    stacks = args.stacks.split(",")
    work = args.work

    runs = []
    for s in stacks:
        runs += c.all_pages(f"/api/v1/orgs/{org}/stacks/{s}/runs")
    final = {}
    for s in stacks:
        for v in c.all_pages(f"/api/v1/orgs/{org}/stacks/{s}/state/versions"):
            final[(s, v["version"])] = v

    # What the API listed during the load: the first checksum seen for each version.
    acked, changed_during = {}, []
    with open(os.path.join(work, "versions.jsonl")) as f:
        for line in f:
            v = json.loads(line)
            key = (v["stack"], v["version"])
            if key in acked:
                changed_during.append(v)
            else:
                acked[key] = v

    # --- runs ---
    def applied(r):
        return r["state"] == "finished" and any(p["state"] == "applying" for p in r["phases"])

    by_state = collections.Counter()
    reasons = collections.defaultdict(collections.Counter)
    for r in runs:
        st = r["state"]
        if st == "finished":
            st = "finished (applied)" if applied(r) else "finished (no changes)"
        by_state[st] += 1
        if r["state"] not in ("finished",) and r["state"] in TERMINAL:
            reasons[r["state"]][(r.get("reason") or "")[:110]] += 1
    stuck = [r for r in runs if r["state"] not in TERMINAL]

    # --- versions ---
    written_by = collections.defaultdict(list)
    for (s, n), v in final.items():
        if v["writer"]["kind"] == "run":
            written_by[v["writer"]["id"]].append(n)
    lost = []
    for key, v in sorted(acked.items()):
        now = final.get(key)
        if now is None:
            lost.append(f"{key[0]} v{key[1]}: listed during the load, missing at the end")
        elif now["checksum"] != v["checksum"]:
            lost.append(f"{key[0]} v{key[1]}: checksum {v['checksum'][:12]} then {now['checksum'][:12]}")
    applied_runs = [r for r in runs if applied(r)]
    # Runs that did not end applied but whose engine wrote state all the same (a runner
    # killed after its engine's write: the orphaned engine finishes, nobody reports).
    ended_with_version = collections.Counter(
        r["state"] for r in runs if r["state"] in TERMINAL and r["state"] != "finished" and written_by.get(r["id"]))
    unwritten = [r for r in applied_runs if not written_by.get(r["id"])]
    for r in unwritten:
        lost.append(f"{r['stack']}: run {r['id']} ended applied, no version written by it at the end")
    acked_total = len(acked) + sum(1 for r in applied_runs if not any(
        (r["stack"], n) in acked for n in written_by.get(r["id"], [])))
    recovered = [v for v in final.values() if v.get("recovered")]
    late = [v for v in final.values() if v["late_write"]]
    forced = [v for v in final.values() if v["forced"]]
    currents = collections.Counter(s for (s, _), v in final.items() if v["current"])
    no_current = [s for s in stacks if currents[s] != 1 and any(k[0] == s for k in final)]

    # --- recovery after each server restart ---
    events = read_faults(os.path.join(work, "faults.tsv"))
    lease_starts = sorted(ts_ms(p["started_at"]) for r in runs for p in r["phases"]
                          if p["state"] == "preparing")
    restarts = []  # (start_ms, ready_ms or None, lease_ms or None)
    db_backs = []  # (kind, back_ms, ready_ms)
    for i, (t, kind, rest) in enumerate(events):
        if kind == "server_start" and rest and rest[0] == "restart":
            ready = next((t2 for t2, k2, _ in events[i + 1:] if k2 == "server_ready"), None)
            lease = next((x for x in lease_starts if x >= t), None)
            restarts.append((t, None if ready is None else ready - t, None if lease is None else lease - t))
        if kind in ("db_start", "db_restarted"):
            ready = next((t2 for t2, k2, _ in events[i + 1:] if k2 == "db_ready"), None)
            db_backs.append((kind, t, None if ready is None else ready - t))
    faults = collections.Counter(rest[1] for t, kind, rest in events if kind == "cycle")

    # --- print ---
    out = []
    w = out.append
    w("")
    w(f"Bosun under faults: {settings['store']}, {settings['stacks']} stacks, {settings['runners']} runners, "
      f"{settings['cycles']} fault cycles, {settings['date']}")
    w(f"build: commit {settings['commit']}" + (" plus local changes" if settings["dirty"] else "")
      + f"; {settings['terraform']}; {os.cpu_count()} CPUs (everything shares them)")
    w("")
    w("settings and commands:")
    for line in settings["commands"]:
        w(f"  {line}")
    w("")
    w("faults injected: " + ", ".join(f"{k} x{v}" for k, v in sorted(faults.items()))
      + f" (seed {settings['seed']}); load {settings['load_seconds']} s, "
      + f"settle {settings['settle']['seconds']} s"
      + ("" if settings["settle"]["settled"] else " (NOT settled: runs still active)"))
    w("")
    hdr = f"{'runs ended':<48}{'count':>8}"
    w(hdr)
    w("-" * len(hdr))
    order = ["finished (applied)", "finished (no changes)", "failed", "force_failed", "interrupted",
             "canceled", "discarded", "skipped"]
    for st in order:
        if by_state.get(st) or st in ("finished (applied)", "failed", "force_failed"):
            w(f"{st:<48}{by_state.get(st, 0):>8}")
    w(f"{'all runs':<48}{len(runs):>8}")
    for st, n in sorted(ended_with_version.items()):
        w(f"{'  ' + st + ', with a version written by it':<48}{n:>8}   (the engine applied; the end went unreported)")
    w(f"{'runs stuck (not ended after the settle wait)':<48}{len(stuck):>8}   (must be 0)")
    w("")
    hdr = f"{'state versions':<48}{'count':>8}"
    w(hdr)
    w("-" * len(hdr))
    w(f"{'acknowledged (listed during the load + applied)':<48}{acked_total:>8}")
    w(f"{'stored at the end':<48}{len(final):>8}")
    w(f"{'lost':<48}{len(lost):>8}   (must be 0)")
    w(f"{'  flagged recovered':<48}{len(recovered):>8}")
    w(f"{'  flagged late_write':<48}{len(late):>8}")
    w(f"{'  forced':<48}{len(forced):>8}")
    w(f"{'checksum changed while listed (immutable!)':<48}{len(changed_during):>8}")
    w("")
    ready = [r for _, r, _ in restarts if r is not None]
    lease = [x for _, _, x in restarts if x is not None]
    hdr = f"{'recovery after a server restart':<48}{'max':>9}{'median':>9}{'n':>5}"
    w(hdr)
    w("-" * len(hdr))
    med = lambda v: statistics.median(v) if v else None
    w(f"{'restart -> /readyz 200':<48}{fmt_s(max(ready) if ready else None):>9}{fmt_s(med(ready)):>9}{len(ready):>5}")
    w(f"{'restart -> next run leased (preparing)':<48}{fmt_s(max(lease) if lease else None):>9}{fmt_s(med(lease)):>9}{len(lease):>5}")
    if db_backs:
        dr = [r for _, _, r in db_backs if r is not None]
        w(f"{'database back -> /readyz 200':<48}{fmt_s(max(dr) if dr else None):>9}{fmt_s(med(dr)):>9}{len(dr):>5}")
    w(f"({len(restarts)} server restarts; a restart followed by another fault before any lease has no lease figure)")
    w("")
    w("acknowledged: every (stack, version, checksum) GET .../state/versions listed during the load")
    w("(polled every second), plus a version written by each run that ended applied. lost:")
    w("acknowledged but missing or with another checksum at the end, or an applied run without")
    w("a version of its own. Recovery: from the restarted server's spawn to /readyz answering")
    w("200, and to the first run phase leased after it (a run entering `preparing`).")
    if reasons:
        w("")
        w("why runs did not finish (reason: count):")
        for st in sorted(reasons):
            for reason, n in reasons[st].most_common(8):
                w(f"  {st}: {reason or '(no reason)'}: {n}")
    if stuck:
        w("")
        w("stuck runs:")
        for r in stuck[:20]:
            w(f"  {r['id']} {r['stack']} {r['state']} updated {r['updated_at']} reason {r.get('reason')!r}")
    if lost:
        w("")
        w("lost versions:")
        for line in lost[:30]:
            w(f"  {line}")
    if changed_during:
        w("")
        w("checksum changed while listed:")
        for v in changed_during[:10]:
            w(f"  {v['stack']} v{v['version']} -> {v['checksum'][:12]}")
    if no_current:
        w("")
        w("stacks without exactly one current version: " + ", ".join(no_current))
    if recovered:
        w("")
        w("recovered versions (reason):")
        for v in recovered[:10]:
            w(f"  {v['writer']['id']} v{v['version']} serial {v['serial']}: {v['recovered']}")
    w("")
    print("\n".join(out))

    summary = {
        "bench": "faults",
        "date": settings["date"],
        "commit": settings["commit"],
        "dirty": settings["dirty"],
        "store": settings["store"],
        "stacks": settings["stacks"],
        "runners": settings["runners"],
        "cycles": settings["cycles"],
        "seed": settings["seed"],
        "faults": dict(faults),
        "runs": dict(by_state),
        "runs_total": len(runs),
        "unfinished_with_version": dict(ended_with_version),
        "stuck": len(stuck),
        "versions_acknowledged": acked_total,
        "versions_stored": len(final),
        "versions_lost": len(lost),
        "versions_recovered": len(recovered),
        "versions_late_write": len(late),
        "checksum_changed": len(changed_during),
        "server_restarts": len(restarts),
        "ready_ms": {"max": max(ready) if ready else None, "median": med(ready)},
        "lease_ms": {"max": max(lease) if lease else None, "median": med(lease)},
        "settle": settings["settle"],
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 1 if stuck or lost or changed_during else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["settle", "report"])
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--org", default="default")
    p.add_argument("--stacks", required=True)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--work", help="report: the work area (versions.jsonl, faults.tsv)")
    args = p.parse_args()
    return settle(args) if args.mode == "settle" else report(args)


if __name__ == "__main__":
    sys.exit(main())
