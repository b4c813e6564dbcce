#!/usr/bin/env python3
"""The report of bench/size.sh: a table per backend on stdout, then one JSON line.

Usage: report.py WORK_DIR SCENARIO... < settings.json
Reads WORK_DIR/<scenario>/{seed.json,scenario.json,<measurement>.json,<measurement>-1c.json,
<measurement>-paced.json}
for scenarios named `<backend>-<stacks>` (sqlite-10000, pg-100000, pg2-10000, …).

Columns per size: p50 and p99 at saturation (the bench's connections in a closed loop),
p99 one request at a time (no queueing), p99 at the offered rate (`p99@rate`: up to the
same connections pacing their requests to the bench's rate), and requests per second at
saturation. `cost ×` is what a request costs at the last size against the first: req/s at
the first ÷ req/s at the last (1.0× is a cost independent of the store's size; 2.0× is
twice the cost). `check` compares the last size with the targets: p99 at the offered rate
below the row's limit and cost growth below 1.25×. Saturation's p99 is shown beside it: in
a closed loop it is about connections ÷ throughput, a figure of the machine's capacity.
"""

import datetime
import json
import os
import sys

LABEL = {"sqlite": "SQLite", "pg": "PostgreSQL", "pg2": "PostgreSQL, 2 replicas (load split between them)"}
GROWTH_OK = 1.25

# key, label, p99 limit in ms (None: no target)
READS = [
    ("api-list", "GET …/stacks?limit=100 (first page)", 50),
    ("api-list-deep", "GET …/stacks?limit=100&cursor= (middle)", 50),
    ("api-stack", "GET …/stacks/{id}", 5),
    ("api-stack-runs", "GET …/stacks/{id}/runs", 50),
    ("api-run", "GET …/runs/{id}", 5),
    ("api-versions", "GET …/stacks/{id}/state/versions", 50),
    ("api-version", "GET …/state/versions/{n}", 5),
    ("api-runners", "GET …/runners", 50),
    ("api-approvals", "GET …/approvals?limit=100", 50),
    ("metrics", "GET /metrics", 50),
    ("page-stacks", "page /orgs/default/stacks", 50),
    ("page-stacks-deep", "page …/stacks?after= (middle)", 50),
    ("page-stack", "page …/stacks/{id}", 50),
    ("page-run", "page …/runs/{id}", 50),
    ("page-state", "page …/stacks/{id}/state", 50),
    ("page-drift", "page …/drift", 50),
    ("page-approvals", "page …/approvals", 50),
    ("page-runners", "page …/runners", 50),
    ("page-audit", "page …/audit", 50),
    ("healthz", "GET /healthz (HTTP floor)", None),
]


def load(path):
    with open(path) as f:
        return json.load(f)


def maybe(path):
    return load(path) if os.path.exists(path) else None


def mib(kib):
    return round(kib / 1024, 1)


def num(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def main():
    work, names = sys.argv[1], sys.argv[2:]
    settings = json.load(sys.stdin)
    now = datetime.datetime.now(datetime.timezone.utc)
    data = {}
    for name in names:
        d = os.path.join(work, name)
        sc = load(os.path.join(d, "scenario.json"))
        sc["seed"] = load(os.path.join(d, "seed.json"))
        sc["reads"] = {}
        for key, _, _ in READS:
            sc["reads"][key] = {
                "load": load(os.path.join(d, f"{key}.json")),
                "one": maybe(os.path.join(d, f"{key}-1c.json")),
                "paced": maybe(os.path.join(d, f"{key}-paced.json")),
            }
        sc["creates"] = load(os.path.join(d, "create.json"))
        sc["dispatch"] = load(os.path.join(d, "dispatch.json"))
        data[name] = sc

    backends = []
    for name in names:
        b = data[name]["backend"]
        if b not in backends:
            backends.append(b)
    conns = settings["connections"]
    print()
    print(f"Bosun store size: org default at each size, {settings['runs_per_stack']} runs and "
          f"{settings['versions_per_stack']} state versions per stack, {settings['runners']} runners, "
          f"{settings['small_orgs']} small orgs of {settings['small_org_stacks']} stacks; "
          f"{os.cpu_count()} CPUs shared by wrk, the server and the database, {now:%Y-%m-%d %H:%M} UTC")
    print(f"build: commit {settings['commit']}" + (" plus local changes" if settings["dirty"] else "")
          + (f"; PostgreSQL {settings['postgres']}" if settings["postgres"] else ""))
    print(f"load: wrk -t{settings['threads']} -c{conns} -d{settings['duration']} per row (saturation); "
          f"p99@1: one connection, -d{settings['latency_duration']}; p99@rate: at most -c{conns} "
          f"-d{settings['paced_duration']} paced to {settings['rate']} req/s "
          f"({settings['metrics_rate']}/s for /metrics); creates: -c{conns} -d{settings['create_duration']}")

    out_backends = {}
    for b in backends:
        scen = [data[n] for n in names if data[n]["backend"] == b]
        scen.sort(key=lambda s: s["stacks"])
        first, last = scen[0], scen[-1]
        print()
        sizes = "  |  ".join(f"{s['stacks']:,} stacks, {s['seed']['runs']:,} runs, "
                             f"{s['seed']['state_versions']:,} versions" for s in scen)
        print(f"{LABEL.get(b, b)} — {sizes}")
        w = 42
        head = f"{'measurement':<{w}}"
        sub = f"{'':<{w}}"
        for s in scen:
            col = f"{s['stacks']:,} stacks"
            head += f"  {col:^38}"
            sub += f"  {'p50':>6} {'p99':>7} {'p99@1':>6} {'@rate':>7} {'req/s':>8}"
        head += f"  {'cost ×':>7}  {'target':<17} check"
        sub += f"  {'':>7}  {'':<17}"
        print(head)
        print(sub)
        print("-" * len(head))
        rows = {}
        for key, label, limit in READS:
            line = f"{label:<{w}}"
            for s in scen:
                r = s["reads"][key]
                one = r["one"]["p99_ms"] if r["one"] else None
                paced = r["paced"]["p99_ms"] if r["paced"] else None
                line += (f"  {num(r['load']['p50_ms'], 2):>6} {num(r['load']['p99_ms'], 2):>7} "
                         f"{num(one, 2):>6} {num(paced, 2):>7} {num(r['load']['rps'], 0):>8}")
            a, z = first["reads"][key]["load"], last["reads"][key]["load"]
            # The target's p99 is the one at the offered rate; without that run (a
            # BENCH_PACED_DURATION of 0) saturation's is all there is to judge.
            zp = last["reads"][key]["paced"]
            if not zp or zp["p99_ms"] is None:
                zp = z
            growth = round(a["rps"] / z["rps"], 2) if z["rps"] else None
            target = "floor, not a target" if limit is None else f"p99<{limit} ms, 1.0×"
            check = ""
            if limit is not None:
                misses = []
                if zp["p99_ms"] >= limit:
                    misses.append(f"p99 {zp['p99_ms']:.1f} ms")
                if len(scen) > 1 and growth is not None and growth >= GROWTH_OK:
                    misses.append(f"grows {growth:.2f}×")
                check = "ok" if not misses else "MISS: " + ", ".join(misses)
            line += f"  {num(growth, 2) + '×':>7}  {target:<17} {check}"
            print(line)
            rows[key] = {
                "by_size": {str(s["stacks"]): s["reads"][key] for s in scen},
                "cost_growth": growth,
                "p99_limit_ms": limit,
            }
        # Creates, memory, size on disk, seeding: one figure per size.
        def simple(label, values, target, growth, check=""):
            line = f"{label:<{w}}"
            for v in values:
                line += f"  {v:>38}"
            g = "" if growth is None else f"{growth:.2f}×"
            print(line + f"  {g:>7}  {target:<17} {check}")

        cr = [s["creates"]["rps"] for s in scen]
        simple("POST …/stacks (creates/s)", [f"{v:,.0f}/s (p99 {s['creates']['p99_ms']:.1f} ms)"
                                            for v, s in zip(cr, scen)],
               "≥1,000/s", round(cr[0] / cr[-1], 2) if cr[-1] else None,
               "ok" if cr[-1] >= 1000 else f"MISS: {cr[-1]:,.0f}/s")
        dp = [s["dispatch"]["dispatch_ms"] for s in scen]
        simple("dispatch: run created → leased (ms)",
               [f"p50 {d['p50']:.1f}, p99 {d['p99']:.1f}" for d in dp],
               "p99<100 ms", round(dp[-1]["p50"] / dp[0]["p50"], 2) if dp[0]["p50"] else None,
               "ok" if dp[-1]["p99"] < 100 else f"MISS: p99 {dp[-1]['p99']:.1f} ms")
        for k, label in [("idle", "server RSS idle (MiB)"), ("peak_load", "server RSS peak under load"),
                         ("after_creates", "server RSS after creates")]:
            vals = [mib(s["rss_kib"][k]) for s in scen]
            simple(label, [f"{v:,.1f} MiB" for v in vals], "<300 MiB", None,
                   "ok" if vals[-1] < 300 else f"MISS: {vals[-1]:.0f} MiB")
        dbs = [s["db_bytes"]["seeded"] / 2**20 for s in scen]
        simple("database on disk, seeded" + (" (file+WAL)" if b == "sqlite" else ""),
               [f"{v:,.0f} MiB" for v in dbs], "", None)
        seeds = [s["seed"]["seconds"]["total"] for s in scen]
        simple("seeding (seconds; per 1,000 stacks)",
               [f"{v:,.0f} s; {v * 1000 / s['stacks']:.2f} s" for v, s in zip(seeds, scen)], "", None)
        busy = ", ".join(f"{s['stacks']:,}: {s['busy_before_pct']} %" for s in scen)
        print(f"machine busy before measuring: {busy}. RSS is the server process only "
              f"(not PostgreSQL's); sampled every 100 ms.")
        out_backends[b] = {
            "reads": rows,
            "scenarios": {str(s["stacks"]): {k: s[k] for k in ("busy_before_pct", "rss_kib", "db_bytes",
                                                                "deep_cursor", "creates", "dispatch",
                                                                "seed")}
                          for s in scen},
        }
    print()
    print("cost × = req/s at the first size ÷ req/s at the last (1.0×: a request costs the same "
          "whatever the store's size). check: the last size against the target, p99 at the "
          "offered rate (@rate); p99 at saturation is about connections ÷ req/s.")
    print()
    print(json.dumps({
        "bench": "size",
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": os.cpu_count(),
        **settings,
        "backends": out_backends,
    }, separators=(",", ":")))


if __name__ == "__main__":
    main()
