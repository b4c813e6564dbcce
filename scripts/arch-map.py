#!/usr/bin/env python3
"""Keeps ARCHITECTURE.md's module map true. The server's tables are generated: each row's
job is its module's own first sentence (its `//!` doc), cut to fit a line; the other
crates' rows are written by hand. `--check` lists source files no row names and rows
naming no file, and fails if there are any. The store's per-domain folders are mapped by
one table of domains, not a row per file."""
import os
import re
import sys

LIMIT = 172
GENERATED = "crates/bosun-server"
# The store's folders with a row each; the rest of those folders is one file per domain.
MAPPED = {f"crates/bosun-store/src/{f}" for f in ("sql/mod.rs", "sql/store/mod.rs", "sql/common.rs", "conformance/mod.rs")}
BY_DOMAIN = tuple(f"crates/bosun-store/src/{d}/" for d in ("records", "sql", "store", "conformance"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def first_sentence(path):
    lines = []
    for line in open(path, encoding="utf-8"):
        if line.startswith("//!"):
            text = line[3:].strip()
            if not text:
                if lines:
                    break
                continue
            lines.append(text)
        elif lines or line.strip():
            break
    text = " ".join(lines)
    text = re.sub(r"\[(`[^`]+`)\]\([^)]*\)", r"\1", text)
    m = re.search(r"\.(\s+)(?=[A-Z`\[(])", text)
    if m:
        text = text[: m.start() + 1]
    if len(text) > LIMIT:
        cut = text[: LIMIT - 1]
        text = cut[: cut.rfind(" ")] + " …"
    return text.replace("|", "\\|")


def main():
    path = os.path.join(ROOT, "ARCHITECTURE.md")
    out, crate, named, stale = [], None, set(), []
    for line in open(path, encoding="utf-8").read().split("\n"):
        h = re.match(r"### `(crates/[^`]+)`", line)
        if h:
            crate = h.group(1)
        row = re.match(r"\| `([^`]+\.rs)` \| (.*) \|$", line)
        if row and crate:
            for base in ("src", ""):
                f = os.path.join(ROOT, crate, base, row.group(1))
                if os.path.isfile(f):
                    named.add(os.path.relpath(f, ROOT))
                    if crate == GENERATED:
                        line = f"| `{row.group(1)}` | {first_sentence(f)} |"
                    break
            else:
                stale.append(f"{crate}: {row.group(1)}")
        out.append(line)
    open(path, "w", encoding="utf-8").write("\n".join(out))
    missing = []
    for d, _, files in os.walk(os.path.join(ROOT, "crates")):
        if "/src" not in d:
            continue
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), ROOT)
            by_domain = rel.startswith(BY_DOMAIN) and rel not in MAPPED
            if f.endswith(".rs") and rel not in named and not by_domain:
                missing.append(rel)
    if "--check" in sys.argv:
        for m in sorted(missing):
            print("no row:", m)
        for s in stale:
            print("no file:", s)
        sys.exit(1 if missing or stale else 0)


main()
