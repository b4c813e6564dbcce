#!/usr/bin/env python3
"""The report of bench/vcs.sh: a table on stdout, then one JSON line with the figures.

Usage: report.py WORK_DIR < settings.json
Reads WORK_DIR/route.json (the last line of `route_bench`, times in microseconds),
e2e.json (`drive.py deliver`), seed.json (`drive.py seed`) and store-{before,after}.json
(`drive.py store`, around the deliveries).
"""

import datetime
import json
import os
import sys
import textwrap

BUSY_LIMIT_PCT = 20  # others' CPU share above this makes the figures suspect


def note(text):
    print(textwrap.fill(text, width=100, subsequent_indent="  "))


def load(path):
    with open(path) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def ms(us):
    return us / 1000.0


def main():
    work = sys.argv[1]
    route, e2e, seed, store0, store1 = (
        load(os.path.join(work, f"{n}.json"))
        for n in ("route", "e2e", "seed", "store-before", "store-after"))
    settings = json.load(sys.stdin)
    now = datetime.datetime.now(datetime.timezone.utc)
    cpus = os.cpu_count()
    n = f"{e2e['stacks']:,}"

    trie, naive, build = route["trie"], route["naive"], route["trie_index_build"]
    ratio_median = naive["median_us"] / trie["median_us"]
    ratio_p99 = naive["p99_us"] / trie["p99_us"]

    print()
    print(f"Bosun VCS routing: one push touching {route['files']:,} files against "
          f"{route['stacks']:,} stacks in one repository; {cpus} CPUs, {now:%Y-%m-%d %H:%M} UTC")
    print(f"build: commit {settings['commit']}" + (" plus local changes" if settings["dirty"] else ""))

    # --- 1 ---
    print()
    note(f"1. Routing alone (bosun-core, in process): time per routing decision = one push "
         f"against all {route['stacks']:,} stacks ({route['prefixes']:,} watch prefixes); "
         f"{route['iterations']} iterations after {route['warmup']} warm-up, the two matchers "
         f"alternating; {route['triggered_a']} / {route['triggered_b']} stacks triggered (push a / b). "
         f"Machine {settings['busy_route_pct']} % busy before.")
    hdr = f"{'matcher':<46}{'median':>11}{'p99':>11}{'mean':>11}"
    print(hdr)
    print("-" * len(hdr))
    for name, s in [("Bosun route(): prefix trie", trie),
                    ("  of which building the trie", build),
                    ("naive peer: every file x every stack's paths", naive)]:
        print(f"{name:<46}{ms(s['median_us']):>8.2f} ms{ms(s['p99_us']):>8.2f} ms"
              f"{ms(s['mean_us']):>8.2f} ms")
    print(f"{'naive peer / Bosun':<46}{ratio_median:>10.1f}x{ratio_p99:>10.1f}x")
    note("The naive peer is what a per-project `when_modified` filter costs (Atlantis-style: each "
         "project checks each modified file against its patterns), with the cheapest possible "
         "pattern test (a per-segment prefix compare, `path_matches`), so it is a lower bound for "
         "glob matching. Both matchers return identical verdicts (checked before timing).")

    # --- 2 ---
    m, tr, cpu, git, wr, rd = (e2e["ms"], e2e["trend_ms"], e2e["server_cpu_ms"], e2e["git_cpu_ms"],
                               e2e["written_mib"], e2e["read_mib"])
    cold = e2e["cold_push"]
    print()
    note(f"2. End to end: signed POST /webhooks/github, {n} stacks, each push a new commit of "
         f"{e2e['files']:,} changed files on the HTTP remote ({e2e['triggered']['a']} / "
         f"{e2e['triggered']['b']} stacks triggered, one run queued each), one delivery at a time. "
         f"Machine busy {e2e['machine_busy_pct']} % during the deliveries, "
         f"{e2e['others_busy_pct']} % of it other processes than the server, the HTTP remote and "
         f"the driver.")
    hdr = (f"{'delivery (ms)':<52}{'n':>4}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}"
           f"{'1st q':>7}{'last q':>7}{'CPU':>6}{'git':>5}{'MiB w':>7}{'MiB r':>7}")
    print(hdr)
    print("-" * len(hdr))
    print(f"{'push, cold (the server clones its mirror)':<52}{1:>4}{cold['ms']:>8.0f}{'':>38}"
          f"{cold['server_cpu_ms']:>6.0f}{cold['git_cpu_ms']:>5.0f}")

    def row(name, k):
        s = m.get(k)
        if not s:
            return
        c = f"{cpu[k]:>6.0f}{git[k]:>5.0f}" if k in cpu else f"{'':>11}"
        w = (f"{wr[k]['mean']:>7.1f}{rd[k]['mean']:>7.1f}" if k in wr and not k.endswith("floor")
             else f"{'':>14}")
        print(f"{name:<52}{s['n']:>4}{s['p50']:>8.0f}{s['p90']:>8.0f}{s['p99']:>8.0f}{s['max']:>8.0f}"
              f"{tr[k][0]:>7.0f}{tr[k][1]:>7.0f}{c}{w}")

    row("push, warm: fetch, diff, route, record (phase 1)", "push")
    row("  git floor: the mirror's git commands alone", "floor")
    if e2e["breakdown_rounds"]:
        print(f"phase 2, {e2e['breakdown_rounds']} rounds on the grown store:")
        row("push, warm", "bd_push")
        row("  git floor", "bd_floor")
        row(f"tag push: load stacks, record {n} decisions", "tag")
        row(f"redelivery of the push: {n} duplicate decisions", "redelivery")
        row(f"PR closed: {n} run lookups + {n} decisions", "pr_closed")
        row("ping: signature, a bare delivery", "ping")
    note("1st q / last q: p50 of the first and of the last quarter of that series (the store grows "
         "with every delivery). CPU: the server process's own CPU ms per delivery; git: its reaped "
         "git children's. MiB w / r: bytes the server process wrote / read per delivery through "
         "syscalls (SQLite's WAL appends, checkpoints and page reads; the socket is negligible), "
         "mean.")

    p = m["push"]
    trie_ms = ms(trie["median_us"])
    routing_share = trie_ms / p["p50"]
    naive_push = p["p50"] - trie_ms + ms(naive["median_us"])
    print()
    note(f"Routing alone is {trie_ms:.1f} ms = {routing_share * 100:.1f} % of a warm push's p50 "
         f"({p['p50']:.0f} ms); with the naive matcher in its place the same push would take about "
         f"{naive_push:.0f} ms ({naive_push / p['p50']:.2f}x). The mirror's git work is "
         f"{m['floor']['p50']:.0f} ms of it (floor p50).")
    if e2e["breakdown_rounds"]:
        bp, bf, t = m["bd_push"]["p50"], m["bd_floor"]["p50"], m["tag"]["p50"]
        note(f"Phase 2 split of a push's p50 ({bp:.0f} ms): git floor {bf:.0f} ms; a tag push, which "
             f"loads the {n} stacks and records {n} decisions in one transaction without git or "
             f"routing, {t:.0f} ms; the remaining {bp - bf - t:.0f} ms is routing "
             f"({trie_ms:.1f} ms), the decisions' reasons, the ~"
             f"{(e2e['triggered']['a'] + e2e['triggered']['b']) // 2} runs created in the same "
             f"transaction and the reply.")

    deliveries = store1["rows"]["deliveries"] - store0["rows"]["deliveries"]
    decisions = store1["rows"]["trigger_decisions"] - store0["rows"]["trigger_decisions"]
    runs = store1["rows"]["runs"] - store0["rows"]["runs"]
    grown = store1["bytes"] - store0["bytes"]
    deciding = max(1, decisions // e2e["stacks"])  # deliveries that recorded a decision per stack
    note(f"Store: {deliveries} deliveries recorded {decisions:,} decisions and {runs:,} queued runs; "
         f"the database grew {grown / 2**20:.1f} MiB ({store0['bytes'] / 2**20:.1f} -> "
         f"{store1['bytes'] / 2**20:.1f} MiB), about {grown / deciding / 1024:.0f} KiB per delivery "
         f"that decides {n} stacks. Per warm push the server wrote {wr['push']['first']:.1f} MiB "
         f"(first quarter, p50) -> {wr['push']['last']:.1f} MiB (last quarter) and read "
         f"{rd['push']['first']:.1f} -> {rd['push']['last']:.1f} MiB.")
    rss = e2e["rss_kib"]
    st = e2e["server_status_end"]
    note(f"Server RSS: {settings['rss_seeded_kib'] / 1024:.0f} MiB after creating the stacks, "
         f"{rss['after_cold'] / 1024:.0f} MiB after the first warm push, "
         f"{rss['after_pushes'] / 1024:.0f} MiB after phase 1, {rss['end'] / 1024:.0f} MiB at the end "
         f"(anonymous {st.get('RssAnon', 0) / 1024:.0f} MiB, {st.get('Threads')} threads). "
         f"Stacks created through the API: {seed['stacks']:,} in {seed['seconds']:.1f} s "
         f"({seed['stacks'] / seed['seconds']:.0f}/s, {seed['workers']} threads).")
    if e2e["others_busy_pct"] > BUSY_LIMIT_PCT:
        note(f"WARNING: other processes used {e2e['others_busy_pct']} % of the machine during the "
             f"deliveries: the end-to-end figures are not representative; re-run when it is idle.")

    out = {
        "bench": "vcs",
        "commit": settings["commit"],
        "dirty": settings["dirty"],
        "cpus": cpus,
        "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "stacks": route["stacks"],
        "files": route["files"],
        "routing": {
            "trie_ms": {k.replace("_us", ""): round(ms(v), 3) for k, v in trie.items()},
            "trie_build_ms": {k.replace("_us", ""): round(ms(v), 3) for k, v in build.items()},
            "naive_ms": {k.replace("_us", ""): round(ms(v), 3) for k, v in naive.items()},
            "ratio_median": round(ratio_median, 2),
            "ratio_p99": round(ratio_p99, 2),
            "iterations": route["iterations"],
            "triggered": [route["triggered_a"], route["triggered_b"]],
            "busy_before_pct": settings["busy_route_pct"],
        },
        "webhook": {
            "pushes": e2e["pushes"],
            "breakdown_rounds": e2e["breakdown_rounds"],
            "cold_push": cold,
            "ms": m,
            "trend_ms": tr,
            "server_cpu_ms": cpu,
            "git_cpu_ms": git,
            "written_mib": wr,
            "read_mib": rd,
            "routing_share_of_push_p50": round(routing_share, 4),
            "push_p50_with_naive_ms": round(naive_push, 1),
            "rss_seeded_kib": settings["rss_seeded_kib"],
            "rss_kib": rss,
            "server_status_end": st,
            "store_before": store0,
            "store_after": store1,
            "machine_busy_pct": e2e["machine_busy_pct"],
            "others_busy_pct": e2e["others_busy_pct"],
            "busy_before_pct": settings["busy_before_pct"],
        },
        "seed": seed,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
