#!/usr/bin/env python3
"""Checks each console page and its JSON API floor once, then times them with wrk.

Reads pages as lines "NAME<TAB>CONSOLE PATH<TAB>API PATH<TAB>MUST CONTAIN" on stdin.
Before timing, each console page must answer 200 with MUST CONTAIN in its HTML (so a
redirect to /login or an error page is never what gets timed), and each API path 200.
Then wrk (one thread, one connection: requests one after another, so the latency is the
server's own time plus loopback, with no queueing) runs DURATION on each, and this prints
one JSON object per page on stdout: p50/p99 of both, and the ratio page / API.
Standard library only.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import urllib.parse


def fetch(host, port, path, headers):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, body


def wrk(url, headers, duration, script):
    cmd = ["wrk", "-t1", "-c1", f"-d{duration}", "--latency", "-s", script]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("BENCH_RESULT ")]
    if not line:
        sys.exit(f"console bench: wrk printed no result for {url}:\n{out}")
    r = json.loads(line[0][len("BENCH_RESULT "):])
    e = r["errors"]
    if r["requests"] == 0 or e["status"] or e["connect"] or e["read"] or e["timeout"]:
        sys.exit(f"console bench: {url}: {r}")
    return {
        "p50_ms": round(r["p50_us"] / 1000, 2),
        "p99_ms": round(r["p99_us"] / 1000, 2),
        "requests": r["requests"],
        "bytes": round(r["bytes"] / r["requests"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--cookie", required=True, help="the console session cookie, NAME=VALUE")
    ap.add_argument("--duration", default="5s")
    ap.add_argument("--script", required=True, help="bench/report.lua")
    args = ap.parse_args()
    u = urllib.parse.urlsplit(args.url)
    page_hdr = {"Cookie": args.cookie}
    api_hdr = {"Authorization": f"Bearer {args.token}"}

    pages = [l.rstrip("\n").split("\t") for l in sys.stdin if l.strip()]
    for name, page, api, must in pages:
        status, body = fetch(u.hostname, u.port, page, page_hdr)
        if status != 200 or must not in body:
            sys.exit(f"console bench: {name}: GET {page} answered {status} without {must!r}:\n{body[:800]}")
        status, body = fetch(u.hostname, u.port, api, api_hdr)
        if status != 200:
            sys.exit(f"console bench: {name}: GET {api} answered {status}:\n{body[:800]}")

    for name, page, api, _ in pages:
        print(f"==> {name}: wrk -t1 -c1 -d{args.duration} {page}  vs  {api}", file=sys.stderr)
        p = wrk(args.url + page, page_hdr, args.duration, args.script)
        a = wrk(args.url + api, api_hdr, args.duration, args.script)
        print(json.dumps({
            "page": name, "console_path": page, "api_path": api,
            "console": p, "api": a,
            "ratio_p50": round(p["p50_ms"] / a["p50_ms"], 1) if a["p50_ms"] else None,
        }), flush=True)


if __name__ == "__main__":
    main()
