#!/usr/bin/env python3
"""Import circles among a crate's source files: the strongly connected components of the
file-level graph of `crate::`/`super::`/`self::` paths (comments and `#[cfg(test)] mod
tests` left out), counted twice — once with those paths only, and once also counting a
folder's `mod.rs` re-exports (`pub use child::…`) as its dependency on the child.

    scripts/import-circles.py [crates/bosun-server/src]
"""
import os
import re
import sys


def modules(root):
    mods = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)[:-3].split("/")
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            mods[tuple(rel)] = p
    return mods


def graph(mods, reexports):
    def resolve(path):
        for i in range(len(path), -1, -1):
            if tuple(path[:i]) in mods:
                return tuple(path[:i])
        return None

    edges = {m: set() for m in mods}
    for m, p in mods.items():
        src = re.sub(r"//[^\n]*", "", open(p, encoding="utf-8").read())
        cut = src.find("#[cfg(test)]\nmod tests")
        if cut >= 0:
            src = src[:cut]
        folder = os.path.basename(p) in ("mod.rs", "lib.rs", "main.rs")
        for mt in re.finditer(r"\b(crate|super|self)((?:::\{?[A-Za-z_][A-Za-z0-9_]*)+)", src):
            head = mt.group(1)
            segs = [s.strip("{") for s in mt.group(2).split("::") if s]
            base = [] if head == "crate" else list(m) if head == "self" else list(m)[:-1]
            target = resolve(base + segs)
            if target is not None and target != m:
                edges[m].add(target)
        if folder and reexports:
            for mt in re.finditer(r"pub(?:\([a-z]+\))? use ([a-z_]+)::", src):
                target = resolve(list(m) + [mt.group(1)])
                if target and target != m:
                    edges[m].add(target)
    return edges


def circles(edges):
    sys.setrecursionlimit(10000)
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted("::".join(x) or "lib" for x in comp))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "crates/bosun-server/src"
    mods = modules(root)
    for label, reexports in (("paths only", False), ("with re-exports", True)):
        found = circles(graph(mods, reexports))
        print(f"{label}: {len(mods)} modules, {len(found)} circles {[len(c) for c in found]}")
        for c in found:
            print("  ", c)


main()
