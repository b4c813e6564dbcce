#!/usr/bin/env python3
"""The report of bench/runs.sh: a table on stdout, then one JSON line with the figures.

Usage: report.py WORK_DIR SCENARIO... < settings.json
Reads WORK_DIR/{latency,throughput}-<scenario>.json (from drive.py) and
WORK_DIR/busy-<scenario> (the machine's busy % before the scenario, server idle).
Scenario names are `noop-<runners>` or `terraform-<runners>`.
"""

import datetime
import json
import os
import sys
import textwrap

TARGET_P99_MS = 100
BUSY_LIMIT_PCT = 20  # others' CPU share above this makes the figures suspect


def note(text):
    print(textwrap.fill(text, width=100))


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def main():
    work, names = sys.argv[1], sys.argv[2:]
    settings = json.load(sys.stdin)
    cpus = os.cpu_count()
    now = datetime.datetime.now(datetime.timezone.utc)
    sc = {}
    for name in names:
        engine, runners = name.rsplit("-", 1)
        with open(os.path.join(work, f"busy-{name}")) as f:
            busy_before = int(f.read().strip())
        sc[name] = {
            "engine": engine,
            "runners": int(runners),
            "busy_before_pct": busy_before,
            "latency": load(os.path.join(work, f"latency-{name}.json")),
            "throughput": load(os.path.join(work, f"throughput-{name}.json")),
        }

    print()
    print(f"Bosun runs: dispatch latency and run throughput, embedded runners on loopback, "
          f"{cpus} CPUs (driver, server, runners and engines share them), "
          f"{now:%Y-%m-%d %H:%M} UTC")
    print(f"build: commit {settings['commit']}" + (" plus local changes" if settings["dirty"] else ""))

    lat = [(n, s) for n, s in sc.items() if s["latency"]]
    if lat:
        print()
        print(f"Dispatch latency: run created (server created_at) -> engine process started; "
              f"{settings['latency_runs']} proposed runs one at a time, runners idle (ms)")
        hdr = (f"{'runners':>7}{'p50':>7}{'p99':>7}{'max':>7}{'lease p50/p99':>15}"
               f"{'prep p50/p99':>14}{'git floor p50/p99':>19}{'minus floor p50/p99':>21}{'run p50':>9}{'p99<100':>9}{'others':>8}")
        print(hdr)
        print("-" * len(hdr))
        for name, s in lat:
            r = s["latency"]
            d, le, pr, tot = r["dispatch_ms"], r["lease_ms"], r["preparing_ms"], r["run_total_ms"]
            fl = r.get("git_floor_ms")
            ok = "yes" if d["p99"] < TARGET_P99_MS else "NO"
            floor = f"{fl['p50']:.0f} / {fl['p99']:.0f}" if fl else "-"
            mf = r.get("dispatch_minus_floor_ms")
            minus = f"{mf['p50']:.0f} / {mf['p99']:.0f}" if mf else "-"
            print(f"{s['runners']:>7}{d['p50']:>7.0f}{d['p99']:>7.0f}{d['max']:>7.0f}"
                  f"{le['p50']:>8.0f} /{le['p99']:>4.0f}{pr['p50']:>8.0f} /{pr['p99']:>4.0f}{floor:>19}{minus:>21}"
                  f"{tot['p50']:>9.0f}{ok:>9}{r['cpu']['others_busy_pct']:>7}%")
        note("lease = the run's `queued` phase (created -> leased by a runner); prep = `preparing`"
              " (leased -> the runner reports started: workspace, git clone, rev-parse, backend"
              " override); the rest of dispatch is that report's round trip and the engine's exec;"
              " run = created -> finished (no-op plan). git floor = the same workspace + clone +"
              " rev-parse run directly right after each run (not a peer product: the part of"
              " dispatch that is git's and the file system's); minus floor = per run, dispatch"
              " minus the floor measured right after it: Bosun's own part. others = CPU used by other"
              " processes during the runs.")
        for name, s in lat:
            r = s["latency"]
            n = len(r["slow_runs"])
            if not n:
                continue
            line = (f"{s['runners']} runner(s): {n} of {r['runs']} runs over {r['slow_threshold_ms']:.0f} ms"
                    f" (slowest {max(x['dispatch_ms'] for x in r['slow_runs']):.0f} ms, "
                    f"time mostly in prep: {sum(x['preparing_ms'] for x in r['slow_runs']) / sum(x['dispatch_ms'] for x in r['slow_runs']) * 100:.0f} %)")
            fast, slow = r.get("stalls_during_fast_runs"), r.get("stalls_during_slow_runs")
            if fast and slow:
                line += (f"; median machine-wide stall during them (Linux PSI, some): I/O {slow['io_ms']:.0f} ms,"
                         f" CPU {slow['cpu_ms']:.0f} ms - during the other runs: I/O {fast['io_ms']:.0f} ms,"
                         f" CPU {fast['cpu_ms']:.0f} ms")
            note(line + ".")

    tp = [(n, s) for n, s in sc.items() if s["throughput"]]
    if tp:
        print()
        print(f"Throughput: proposed runs per minute, {settings['slots_per_runner']} runs outstanding "
              f"per runner (one stack each), {settings['duration']} s window after "
              f"{settings['warmup']} s warm-up")
        hdr = (f"{'engine':<20}{'runners':>7}{'runs/min':>10}{'run p50 ms':>12}{'queued':>8}"
               f"{'prep':>8}{'plan':>8}{'server':>8}{'git+eng':>9}{'busy':>6}{'others':>8}")
        print(hdr)
        print("-" * len(hdr))
        for name, s in tp:
            r = s["throughput"]
            c = r["cpu"]
            label = "no-op engine" if s["engine"] == "noop" else (settings["terraform"] or s["engine"])
            print(f"{label:<20}{s['runners']:>7}{r['runs_per_minute']:>10.0f}{r['run_total_ms']['p50']:>12.0f}"
                  f"{r['queued_ms']['p50']:>8.0f}{r['preparing_ms']['p50']:>8.0f}"
                  f"{r['planning_ms']['p50']:>8.0f}{c['server_cores']:>8.2f}{c['children_cores']:>9.2f}"
                  f"{c['machine_busy_pct']:>5}%{c['others_busy_pct']:>7}%")
        note("queued/prep/plan: p50 ms of each phase (plan = engine init + plan + show -json, plan"
              " upload, report). server / git+eng: cores' worth of CPU of the server process"
              " (HTTP, store, runners) and of its child processes (git, the engine).")
        note("busy: the whole machine; others: busy minus this benchmark (server, children, driver).")
        # Bosun's share: runner-time per run (runners x 60 s / runs per minute) for no-op vs
        # the real engine at the same runner count.
        peers = [(n, s) for n, s in tp if s["engine"] != "noop"]
        for pname, p in peers:
            same = sc.get(f"noop-{p['runners']}")
            if same and same["throughput"]:
                noop_ms = p["runners"] * 60000 / same["throughput"]["runs_per_minute"]
                real_ms = p["runners"] * 60000 / p["throughput"]["runs_per_minute"]
                note(f"At {p['runners']} runners a run occupies a runner for {noop_ms:.0f} ms with the"
                      f" no-op engine and {real_ms:.0f} ms with {settings['terraform']}: Bosun's own"
                      f" work (with git) is ~{noop_ms / real_ms * 100:.0f} % of a Terraform run here.")

    worst = max([s["busy_before_pct"] for s in sc.values()] +
                [s[k]["cpu"]["others_busy_pct"] for s in sc.values()
                 for k in ("latency", "throughput") if s[k] and s[k].get("cpu")])
    note(f"Machine busy before each scenario (server idle, 1 s): "
          + ", ".join(f"{n} {s['busy_before_pct']}%" for n, s in sc.items())
          + f". Worst share used by other processes: {worst}%"
          + (f" - above {BUSY_LIMIT_PCT}%: re-run on a quieter machine." if worst > BUSY_LIMIT_PCT else "."))
    print()

    out = {
        "bench": "runs",
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": cpus,
        "commit": settings["commit"],
        "dirty": settings["dirty"],
        "settings": settings,
        "target_dispatch_p99_ms": TARGET_P99_MS,
        "others_busy_worst_pct": worst,
        "latency": {
            str(s["runners"]): {
                k: v for k, v in s["latency"].items()
                if k in ("runs", "dispatch_ms", "lease_ms", "preparing_ms", "started_to_engine_ms",
                         "run_total_ms", "create_request_ms", "git_floor_ms", "dispatch_minus_floor_ms", "cpu", "slow_threshold_ms",
                         "stalls_during_fast_runs", "stalls_during_slow_runs")
            } | {"busy_before_pct": s["busy_before_pct"], "slow_runs": len(s["latency"]["slow_runs"])}
            for _, s in lat
        },
        "throughput": {
            f"{s['engine']}-{s['runners']}": {
                k: v for k, v in s["throughput"].items()
                if k in ("runs_per_minute", "runs_in_window", "window_seconds", "slots", "run_total_ms",
                         "queued_ms", "preparing_ms", "planning_ms", "polls_per_run", "cpu")
            } | {"busy_before_pct": s["busy_before_pct"]}
            for _, s in tp
        },
    }
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
