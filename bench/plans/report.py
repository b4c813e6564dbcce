#!/usr/bin/env python3
"""Tables and JSON line for bench/plans.sh (standard library only).

    report.py RESULTS.jsonl META.json

RESULTS.jsonl: one line per run, written by plans.sh: {"tool", "hosts", "rep", "kind"
("timed" or "warmup"), "shell" ("login" or "shlvl": which fleet), "scenario" ("normal" or
"slow"), "ok", "error", "wall_s", "peak_rss_kib", "peak_pss_kib", "peak_procs",
"tree_cpu_s", "host_cpu_s", "machine_cpu_s", "sampler_cpu_s", "leftover_procs",
"logins_min", "logins_max", "shells_min", "shells_max", "busy_before"}. "other CPU" =
machine busy − tool − hosts − sampler, per run (other processes, and kernel work charged
to no process). Figures per (shell, hosts, tool) are medians over the timed normal runs
that succeeded; a (shell, hosts, tool) with any failed timed run is reported as failed.
"× floor" is a tool's median wall time over the floor's, same shell and N. The slow-host
scenario's figures are medians over its runs, set against the same tool's normal runs at
that N on that fleet. Exit status 1 if any run (warm-up included) failed.
"""

import json
import statistics
import sys

TOOLS = ["floor", "bosun", "pyinfra", "ansible"]  # the report's row order
SHORT = {"floor": "floor", "bosun": "Bosun", "pyinfra": "pyinfra", "ansible": "Ansible"}
SHELL_LABEL = {"login": "login shell", "shlvl": "SHLVL=1"}
GOAL_FROM_HOSTS = 50
GOAL_VS = {"ansible": 0.25, "pyinfra": 0.5}
KEYS = ("wall_s", "peak_rss_kib", "peak_pss_kib", "peak_procs", "tree_cpu_s", "host_cpu_s",
        "machine_cpu_s", "sampler_cpu_s", "others_cpu_s", "logins_max", "shells_max")


def long_label(tool, n):
    return {
        "floor": "raw OpenSSH: one connection + one shell script per host (the floor)",
        "bosun": f"Bosun (`plan exec --forks {n}`)",
        "pyinfra": f"pyinfra (`--parallel {n}`)",
        "ansible": f"ansible-core (`-f {n}`, pipelining, ControlPersist)",
    }[tool]


def med(xs):
    return statistics.median(xs) if xs else None


def fmt_s(x):
    if x is None:
        return "–"
    return f"{x:.2f} s" if abs(x) < 10 else f"{x:.1f} s"


def fmt_signed_s(x):
    if x is None:
        return "–"
    return ("+" if x >= 0 else "−") + fmt_s(abs(x))


def fmt_mib(kib):
    return "–" if kib is None else f"{kib / 1024:,.0f}"


def fmt_ratio(x):
    if x is None:
        return "–"
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def fmt_shells(s):
    lo, hi = s.get("shells_lo"), s.get("shells_hi")
    if lo is None or hi is None:
        return "–"
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def summarise(rs):
    """Medians over the successful runs of one (shell, hosts, tool, scenario)."""
    ok = [r for r in rs if r["ok"]]
    s = {"runs": len(rs), "ok_runs": len(ok), "failed": len(ok) < len(rs) or not rs}
    if ok:
        for key in KEYS:
            vals = [r[key] for r in ok if r.get(key) is not None]
            s[key] = med(vals)
        s["wall_all_s"] = [round(r["wall_s"], 3) for r in ok]
        s["leftover_procs"] = max(r["leftover_procs"] for r in ok)
        s["shells_lo"] = min(r["shells_min"] for r in ok)
        s["shells_hi"] = max(r["shells_max"] for r in ok)
        s["logins_hi"] = max(r["logins_max"] for r in ok)
    return s


def main():
    results_path, meta_path = sys.argv[1], sys.argv[2]
    with open(meta_path) as f:
        meta = json.load(f)
    runs = []
    with open(results_path) as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))

    tools = [t for t in TOOLS if t in meta["tools"]]
    shells = meta["shells"]
    hosts_list = meta["hosts"]
    slow_meta = meta.get("slow")
    failures = []
    for r in runs:
        # CPU the machine spent beyond the tool, the hosts and the sampler: other processes,
        # and kernel work not charged to any process (loopback networking in softirq).
        r["others_cpu_s"] = r["machine_cpu_s"] - r["tree_cpu_s"] - r["host_cpu_s"] - r["sampler_cpu_s"]
        if not r["ok"]:
            failures.append({k: r.get(k) for k in ("tool", "hosts", "shell", "scenario", "rep", "kind", "error")})

    def pick(shell, n, t, scenario):
        return [r for r in runs if r["tool"] == t and r["hosts"] == n and r["shell"] == shell
                and r["kind"] == "timed" and r["scenario"] == scenario]

    summary = {v: {n: {t: summarise(pick(v, n, t, "normal")) for t in tools} for n in hosts_list}
               for v in shells}

    def value(v, n, t, key):
        s = summary[v][n].get(t)
        if not s or s["failed"]:
            return None
        return s.get(key)

    def ratio(a, b):
        return round(a / b, 4) if a is not None and b else None

    x_floor, ratios, goal = {}, {}, {}
    for v in shells:
        x_floor[v], ratios[v], goal[v] = {}, {}, {}
        for n in hosts_list:
            floor = value(v, n, "floor", "wall_s")
            x_floor[v][n] = {t: ratio(value(v, n, t, "wall_s"), floor) for t in tools}
            ratios[v][n] = {}
            for other in ("ansible", "pyinfra"):
                for key, name in (("wall_s", "time"), ("peak_rss_kib", "memory")):
                    ratios[v][n][f"{name}_vs_{other}"] = ratio(value(v, n, "bosun", key), value(v, n, other, key))
            if n >= GOAL_FROM_HOSTS and "bosun" in tools:
                g = {}
                for other, limit in GOAL_VS.items():
                    if other in tools:
                        r = ratios[v][n][f"time_vs_{other}"]
                        g[f"vs_{other}"] = None if r is None else r <= limit
                if g:
                    goal[v][n] = g

    slow = None
    if slow_meta:
        sn, sv, secs = slow_meta["hosts"], slow_meta["shell"], slow_meta["secs"]
        expected = secs * slow_meta["sleeping_steps"]
        slow = {"hosts": sn, "shell": sv, "host": slow_meta["host"], "secs": secs,
                "expected_difference_s": expected, "tools": {}}
        for t in tools:
            s = summarise(pick(sv, sn, t, "slow"))
            normal = value(sv, sn, t, "wall_s")
            w = None if s["failed"] else s.get("wall_s")
            diff = None if w is None or normal is None else w - normal
            slow["tools"][t] = {
                "runs": s["runs"], "ok_runs": s["ok_runs"], "failed": s["failed"],
                "wall_s": w, "wall_all_s": s.get("wall_all_s"), "normal_wall_s": normal,
                "difference_s": diff, "beyond_sleep_s": None if diff is None else diff - expected,
                "shells_max": s.get("shells_hi"),
            }

    out = []
    dirty = {True: " (local changes)", False: "", None: ""}[meta["dirty"]]
    built = (f"bosun binary {meta['bosun_bin']} (given; not built here)" if meta.get("bosun_bin")
             else f"commit {meta['commit']}{dirty}")
    out.append(
        f"Plans benchmark: one workload (lineinfile, copy, command, directory, shell) over N loopback "
        f"sshd hosts; median of {meta['repeat']} runs per tool, N and shell variant; {built}; "
        f"{meta['cores']} CPUs shared by the tool and every sshd; the hosts' user shell "
        f"{meta.get('user_shell', '?')}."
    )
    variant_text = {
        "login": "login shell = the user's shell as sshd starts it for every remote command "
                 "(bash reads ~/.bashrc each time, as this user's hosts do)",
        "shlvl": "SHLVL=1 = sshd sets SHLVL=1 in every session (bash skips ~/.bashrc)",
    }
    out.append("Shell variants: " + "; ".join(variant_text[v] for v in shells) + ".")
    out.append("× floor = the tool's wall time over the floor's (same N, same variant). "
               "Remote shells/host = sessions for which sshd started the user's shell, per host.")
    for n in hosts_list:
        out.append("")
        out.append(f"{n} hosts:")
        out.append("")
        head = ["tool"]
        for v in shells:
            lab = SHELL_LABEL[v]
            head += [f"{lab}: wall", "× floor", "remote shells/host", "tool CPU", "peak MiB"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|" + "|".join(["---:"] * (len(head) - 1)) + "|")
        for t in tools:
            row = [long_label(t, n)]
            for v in shells:
                s = summary[v][n][t]
                if s["failed"]:
                    row += [f"FAILED ({s['ok_runs']}/{s['runs']} runs ok)", "", "", "", ""]
                    continue
                r = x_floor[v][n][t]
                row += [fmt_s(s["wall_s"]), f"**{fmt_ratio(r)}**" if t != "floor" else fmt_ratio(r),
                        fmt_shells(s), f"{s['tree_cpu_s']:.1f} s", fmt_mib(s["peak_rss_kib"])]
            out.append("| " + " | ".join(row) + " |")

    out.append("")
    out.append("Every run (normal scenario):")
    out.append("")
    out.append("| hosts | shell | tool | wall, each run | peak MiB (sum of RSS) | PSS MiB at the peak | "
               "peak processes | tool CPU | host-side CPU | other CPU | SSH logins/host | remote shells/host |")
    out.append("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in hosts_list:
        for v in shells:
            for t in tools:
                s = summary[v][n][t]
                if s["failed"]:
                    out.append(f"| {n} | {SHELL_LABEL[v]} | {SHORT[t]} | FAILED ({s['ok_runs']}/{s['runs']} runs ok) "
                               "| | | | | | | | |")
                    continue
                out.append(
                    f"| {n} | {SHELL_LABEL[v]} | {SHORT[t]} | {', '.join(fmt_s(w) for w in s['wall_all_s'])} | "
                    f"{fmt_mib(s['peak_rss_kib'])} | {fmt_mib(s['peak_pss_kib'])} | {s['peak_procs']:.0f} | "
                    f"{s['tree_cpu_s']:.1f} s | {s['host_cpu_s']:.1f} s | {max(0.0, s['others_cpu_s']):.1f} s | "
                    f"{s['logins_hi']} | {fmt_shells(s)} |"
                )

    if slow:
        out.append("")
        out.append(
            f"Slow host: {slow['hosts']} hosts, {SHELL_LABEL[slow['shell']]}; on {slow['host']} alone the "
            f"shell step (e) starts with `sleep {slow['secs']}` (1 step sleeps on 1 host). If one slow host "
            f"delays only the step barrier, every tool's wall time grows by ≈ {slow['expected_difference_s']} s "
            f"(the sleep × the steps that sleep), not more: more would mean the slow host held up the other "
            f"hosts' work."
        )
        out.append("")
        out.append(f"| tool | wall, {slow['hosts']} hosts | wall, one slow host | difference | "
                   f"beyond the {slow['expected_difference_s']} s sleep |")
        out.append("|---|---:|---:|---:|---:|")
        for t in tools:
            s = slow["tools"][t]
            if s["failed"]:
                out.append(f"| {SHORT[t]} | {fmt_s(s['normal_wall_s'])} | FAILED ({s['ok_runs']}/{s['runs']} runs ok) | | |")
                continue
            out.append(f"| {SHORT[t]} | {fmt_s(s['normal_wall_s'])} | {fmt_s(s['wall_s'])} | "
                       f"{fmt_signed_s(s['difference_s'])} | {fmt_signed_s(s['beyond_sleep_s'])} |")

    out.append("")
    parts = []
    for v in shells:
        for n, g in goal[v].items():
            bits = []
            for other, limit in GOAL_VS.items():
                if f"vs_{other}" in g:
                    r = ratios[v][n][f"time_vs_{other}"]
                    verdict = {True: "met", False: "MISSED", None: "n/a"}[g[f"vs_{other}"]]
                    bits.append(f"≤ {limit}× {SHORT[other]}: {verdict} ({fmt_ratio(r)})")
            parts.append(f"{n} hosts, {SHELL_LABEL[v]}: " + ", ".join(bits))
    if parts:
        out.append(f"Goal at {GOAL_FROM_HOSTS}+ hosts — " + "; ".join(parts))
    out.append("Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    if failures:
        out.append("")
        out.append("FAILED runs:")
        for f_ in failures:
            out.append(f"  {f_['tool']} {f_['hosts']} hosts, {f_['shell']}, {f_['scenario']} "
                       f"({f_['kind']} {f_['rep']}): {f_['error']}")
    print("\n".join(out))

    def clean(d):
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}

    doc = {
        "benchmark": "plans",
        "commit": meta["commit"],
        "dirty": meta["dirty"],
        "bosun_bin": meta.get("bosun_bin"),
        "cores": meta["cores"],
        "versions": meta["versions"],
        "user_shell": meta.get("user_shell"),
        "shells": shells,
        "repeat": meta["repeat"],
        "interval_ms": meta["interval_ms"],
        "results": {v: {str(n): {t: clean(summary[v][n][t]) for t in tools} for n in hosts_list}
                    for v in shells},
        "x_floor": {v: {str(n): x_floor[v][n] for n in hosts_list} for v in shells},
        "ratios": {v: {str(n): ratios[v][n] for n in hosts_list} for v in shells},
        "goal": {v: {str(n): g for n, g in goal[v].items()} for v in shells},
        "slow": None if slow is None else {**slow, "tools": {t: clean(s) for t, s in slow["tools"].items()}},
        "failures": failures,
    }
    print(json.dumps(doc, separators=(",", ":")))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
