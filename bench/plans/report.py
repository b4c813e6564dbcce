#!/usr/bin/env python3
"""Table and JSON line for bench/plans.sh (standard library only).

    report.py RESULTS.jsonl META.json

RESULTS.jsonl: one line per run, written by plans.sh: {"tool", "hosts", "rep", "kind"
("timed" or "warmup"), "ok", "error", "wall_s", "peak_rss_kib", "peak_pss_kib", "peak_procs",
"tree_cpu_s", "host_cpu_s", "machine_cpu_s", "sampler_cpu_s", "leftover_procs",
"logins_min", "logins_max", "busy_before"}. "other CPU" = machine busy − tool − hosts −
sampler, per run (other processes, and kernel work charged to no process). Figures per (hosts, tool) are medians over
the timed runs that succeeded; a (hosts, tool) with any failed timed run is reported as
failed. Exit status 1 if any run (warm-up included) failed.
"""

import json
import statistics
import sys

TOOLS = [("bosun", "Bosun"), ("ansible", "Ansible"), ("pyinfra", "pyinfra")]
GOAL_FROM_HOSTS = 50
GOAL_VS = {"ansible": 0.25, "pyinfra": 0.5}


def med(xs):
    return statistics.median(xs) if xs else None


def fmt_s(x):
    if x is None:
        return "–"
    return f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def fmt_mib(kib):
    return "–" if kib is None else f"{kib / 1024:,.0f}"


def fmt_ratio(x):
    return "–" if x is None else f"{x:.2f}×"


def main():
    results_path, meta_path = sys.argv[1], sys.argv[2]
    with open(meta_path) as f:
        meta = json.load(f)
    runs = []
    with open(results_path) as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))

    tools = [t for t, _ in TOOLS if t in meta["tools"]]
    label = dict(TOOLS)
    hosts_list = meta["hosts"]
    summary = {}
    failures = []
    for r in runs:
        # CPU the machine spent beyond the tool, the hosts and the sampler: other processes,
        # and kernel work not charged to any process (loopback networking in softirq).
        r["others_cpu_s"] = r["machine_cpu_s"] - r["tree_cpu_s"] - r["host_cpu_s"] - r["sampler_cpu_s"]
        if not r["ok"]:
            failures.append({k: r.get(k) for k in ("tool", "hosts", "rep", "kind", "error")})
    for n in hosts_list:
        summary[n] = {}
        for t in tools:
            rs = [r for r in runs if r["tool"] == t and r["hosts"] == n and r["kind"] == "timed"]
            ok = [r for r in rs if r["ok"]]
            s = {"runs": len(rs), "ok_runs": len(ok), "failed": len(ok) < len(rs) or not rs}
            if ok:
                for key in ("wall_s", "peak_rss_kib", "peak_pss_kib", "peak_procs", "tree_cpu_s", "host_cpu_s",
                            "machine_cpu_s", "sampler_cpu_s", "others_cpu_s", "logins_max"):
                    s[key] = med([r[key] for r in ok])
                s["wall_all_s"] = [round(r["wall_s"], 3) for r in ok]
                s["leftover_procs"] = max(r["leftover_procs"] for r in ok)
            summary[n][t] = s

    def value(n, t, key):
        s = summary[n].get(t)
        if not s or s["failed"]:
            return None
        return s.get(key)

    ratios, goal = {}, {}
    for n in hosts_list:
        ratios[n] = {}
        for other in ("ansible", "pyinfra"):
            for key, name in (("wall_s", "time"), ("peak_rss_kib", "memory")):
                b, o = value(n, "bosun", key), value(n, other, key)
                ratios[n][f"{name}_vs_{other}"] = round(b / o, 4) if b is not None and o else None
        if n >= GOAL_FROM_HOSTS and "bosun" in tools:
            g = {}
            for other, limit in GOAL_VS.items():
                if other in tools:
                    r = ratios[n][f"time_vs_{other}"]
                    g[f"vs_{other}"] = None if r is None else r <= limit
            goal[n] = g

    out = []
    out.append(
        f"Plans benchmark: one workload (lineinfile, copy, command, directory, shell) over N loopback "
        f"sshd hosts; median of {meta['repeat']} runs per tool and N; commit {meta['commit']}"
        f"{' (local changes)' if meta['dirty'] else ''}; {meta['cores']} CPUs shared by the tool and "
        f"every sshd"
    )
    out.append("")
    head = ["hosts"] + [f"{label[t]} wall" for t in tools]
    others = [o for o in ("ansible", "pyinfra") if "bosun" in tools and o in tools]
    head += [f"**Bosun / {label[o]}**" for o in others]
    head += [f"{label[t]} peak MiB" for t in tools]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---:"] * len(head)) + "|")
    for n in hosts_list:
        row = [str(n)]
        for t in tools:
            s = summary[n][t]
            row.append("FAILED" if s["failed"] else fmt_s(s["wall_s"]))
        for o in others:
            row.append(f"**{fmt_ratio(ratios[n][f'time_vs_{o}'])}**")
        for t in tools:
            s = summary[n][t]
            row.append("FAILED" if s["failed"] else fmt_mib(s["peak_rss_kib"]))
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    out.append("| hosts | tool | wall, each run | peak MiB (sum of RSS) | PSS MiB at the peak | "
               "peak processes | tool CPU | host-side CPU | other CPU | SSH logins per host |")
    out.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in hosts_list:
        for t in tools:
            s = summary[n][t]
            if s["failed"]:
                out.append(f"| {n} | {label[t]} | FAILED ({s['ok_runs']}/{s['runs']} runs ok) | | | | | | | |")
                continue
            out.append(
                f"| {n} | {label[t]} | {', '.join(fmt_s(w) for w in s['wall_all_s'])} | "
                f"{fmt_mib(s['peak_rss_kib'])} | {fmt_mib(s['peak_pss_kib'])} | {s['peak_procs']:.0f} | {s['tree_cpu_s']:.1f} s | "
                f"{s['host_cpu_s']:.1f} s | {max(0.0, s['others_cpu_s']):.1f} s | {s['logins_max']:.0f} |"
            )
    out.append("")
    if goal:
        parts = []
        for n, g in goal.items():
            bits = []
            for other, limit in GOAL_VS.items():
                if f"vs_{other}" in g:
                    r = ratios[n][f"time_vs_{other}"]
                    verdict = {True: "met", False: "MISSED", None: "n/a"}[g[f"vs_{other}"]]
                    bits.append(f"≤ {limit}× {label[other]}: {verdict} ({fmt_ratio(r)})")
            parts.append(f"{n} hosts: " + ", ".join(bits))
        out.append(f"Goal at {GOAL_FROM_HOSTS}+ hosts — " + "; ".join(parts))
    out.append(
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    )
    if failures:
        out.append("")
        out.append("FAILED runs:")
        for f_ in failures:
            out.append(f"  {f_['tool']} {f_['hosts']} hosts ({f_['kind']} {f_['rep']}): {f_['error']}")
    print("\n".join(out))

    def clean(d):
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}

    doc = {
        "benchmark": "plans",
        "commit": meta["commit"],
        "dirty": meta["dirty"],
        "cores": meta["cores"],
        "versions": meta["versions"],
        "repeat": meta["repeat"],
        "interval_ms": meta["interval_ms"],
        "results": {str(n): {t: clean(summary[n][t]) for t in tools} for n in hosts_list},
        "ratios": {str(n): ratios[n] for n in hosts_list},
        "goal": {str(n): g for n, g in goal.items()},
        "failures": failures,
    }
    print(json.dumps(doc, separators=(",", ":")))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
