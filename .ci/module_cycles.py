#!/usr/bin/env python3
"""Fails when a crate's modules import each other in a circle.

Reads every `crate::`, `super::` and `self::` path in each crate's `src/` (in `use` items
and in expressions), maps it to the module file that defines it, and looks for strongly
connected components in the file graph. A child module naming its own parent (`super::`)
is allowed: that is a module and its private parts, not two modules tied together. Test
modules (`#[cfg(test)] mod tests` and files named tests.rs) are left out: tests may reach
anywhere.

Usage: python3 .ci/module_cycles.py [CRATE_DIR ...]   (default: proto shard router server)
Exit status 1 and the cycles listed when any crate has one.
"""
import os
import re
import sys
STRICT = int(os.environ.get("STRICT", "1"))

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"\buse\s+(crate|super|self)::([^;]*);", re.S)


def module_files(src):
    """Maps module path tuples to files: ('op','search') -> src/op/search.rs."""
    mods = {}
    for root, _dirs, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            full = os.path.join(root, name)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            mods[tuple(rel)] = full
    return mods


def strip_tests(text):
    """Drops `#[cfg(test)]` items (a `mod tests { ... }` block or a single item)."""
    out = []
    i = 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k = text.find("{", j)
        semi = text.find(";", j)
        if semi >= 0 and (k < 0 or semi < k):
            i = semi + 1
            continue
        depth = 0
        p = k
        while p < len(text):
            if text[p] == "{":
                depth += 1
            elif text[p] == "}":
                depth -= 1
                if depth == 0:
                    break
            p += 1
        i = p + 1
    return "".join(out)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def expand_use(tree):
    """Expands `a::{b, c::{d, e}}` into ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    depth = 0
    for idx, ch in enumerate(tree):
        if ch == "{":
            prefix = tree[:idx]
            inner = tree[idx + 1 : tree.rfind("}")]
            parts, cur, d = [], "", 0
            for c in inner:
                if c == "," and d == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                d += c == "{"
                d -= c == "}"
                cur += c
            if cur:
                parts.append(cur)
            res = []
            for p in parts:
                for e in expand_use(p):
                    res.append(prefix + e if e not in ("self",) else prefix.rstrip(":"))
            return res
    return [tree.split(" as ")[0]]


def resolve(mods, here, anchor, path):
    if anchor == "crate":
        base = ()
    elif anchor == "self":
        base = here
    else:
        base = here[:-1]
    parts = [p for p in path.split("::") if p and p != "self" and p != "*"]
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    full = tuple(base) + tuple(parts)
    for n in range(len(full), -1, -1):
        if full[:n] in mods:
            return full[:n]
    return None


def crate_cycles(crate_dir):
    src = os.path.join(crate_dir, "src")
    mods = module_files(src)
    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        if mod and mod[-1] == "tests":
            continue
        with open(path, encoding="utf-8") as fh:
            text = strip_comments(strip_tests(fh.read()))
        here = mod
        # A file's own module path: for a.rs and a/mod.rs alike `self` is the file itself.
        targets = []
        for anchor, tree in USE_RE.findall(text):
            for p in expand_use(tree):
                targets.append((anchor, p))
        for anchor, rest in PATH_RE.findall(text):
            targets.append((anchor, rest[2:]))
        for anchor, p in targets:
            t = resolve(mods, here, anchor, p)
            if t is None or t == mod:
                continue
            # A module and its own descendants or ancestors: parent/child, not a circle.
            if STRICT == 0 and (t == mod[: len(t)] or mod == t[: len(mod)]):
                continue
            graph[mod].add(t)
    return [c for c in tarjan(graph) if len(c) > 1], mods


def tarjan(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    crates = sys.argv[1:] or ["proto", "shard", "router", "server"]
    failed = False
    for crate in crates:
        cycles, mods = crate_cycles(crate)
        for comp in cycles:
            failed = True
            names = sorted(os.path.relpath(mods[m], crate) for m in comp)
            print(f"{crate}: import cycle of {len(names)} files: {' '.join(names)}")
    if failed:
        sys.exit(1)
    print(f"module cycles: none in {' '.join(crates)}")


if __name__ == "__main__":
    main()
