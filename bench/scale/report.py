#!/usr/bin/env python3
"""The report of bench/scale.sh: a table on stdout, then one JSON line with the figures.

Usage: report.py WORK_DIR SCENARIO... < settings.json
Reads WORK_DIR/{latency,throughput}-<scenario>.json (from scale/drive.py) and
WORK_DIR/busy-<scenario>. Scenario names are `<backend>-<replicas>` (sqlite-1, pg-1, pg-2).
"""

import datetime
import json
import os
import sys

LABEL = {"sqlite": "SQLite", "pg": "PostgreSQL"}


def load(path):
    with open(path) as f:
        return json.load(f)


def fmt(v):
    return "-" if v is None else f"{v:,.1f}"


def main():
    work, names = sys.argv[1], sys.argv[2:]
    settings = json.load(sys.stdin)
    now = datetime.datetime.now(datetime.timezone.utc)
    rows = {}
    for name in names:
        backend, replicas = name.rsplit("-", 1)
        with open(os.path.join(work, f"busy-{name}")) as f:
            busy = int(f.read().strip())
        rows[name] = {
            "backend": backend,
            "replicas": int(replicas),
            "busy_before_pct": busy,
            "latency": load(os.path.join(work, f"latency-{name}.json")),
            "throughput": load(os.path.join(work, f"throughput-{name}.json")),
        }
    print()
    print(f"Bosun scale-out: {settings['runners']} embedded runners in all (spread over the replicas), "
          f"no-op engine, {os.cpu_count()} CPUs shared by everything, {now:%Y-%m-%d %H:%M} UTC")
    print(f"build: commit {settings['commit']}" + (" plus local changes" if settings["dirty"] else ""))
    print(f"throughput: {settings['slots']} proposed runs outstanding (one stack each), "
          f"{settings['duration']}s window after {settings['warmup']}s warm-up; "
          f"latency: {settings['latency_runs']} runs one at a time, created alternately on the replicas")
    print()
    print("| store | replicas | **runs/min** | run p50 | dispatch p50 | dispatch p99 | lease p50 | busy before |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        t, lat = r["throughput"], r["latency"]
        print(f"| {LABEL.get(r['backend'], r['backend'])} | {r['replicas']} | **{t['runs_per_minute']:,.0f}** "
              f"| {fmt(t['run_total_ms']['p50'])} ms | {fmt(lat['dispatch_ms']['p50'])} ms "
              f"| {fmt(lat['dispatch_ms']['p99'])} ms | {fmt(lat['lease_ms']['p50'])} ms "
              f"| {r['busy_before_pct']} % |")
    for name, r in rows.items():
        by = r["latency"].get("dispatch_by_create_replica_ms") or {}
        if len(by) > 1:
            parts = ", ".join(f"created on replica {k}: p50 {fmt(v['p50'])} / p99 {fmt(v['p99'])} ms"
                              for k, v in by.items())
            print(f"\n{name} dispatch by the replica the run was created on: {parts}")
    print()
    print(json.dumps({"bench": "scale", **settings, "scenarios": rows}, separators=(",", ":")))


if __name__ == "__main__":
    main()
