#!/usr/bin/env python3
"""The server's module import graph must have no circle (issue 23).

Reads every module of server/src (a file is a module: `a/b.rs` and
`a/b/mod.rs` are `a::b`), finds the modules each one names through
`crate::...` and `super::...` paths (tests excluded: `tests.rs`,
`*_tests.rs`, and inline `mod tests` blocks), and fails when the graph has a
strongly connected component of more than one module, printing it. A
module's references to its own descendants do not count (a folder's
`mod.rs` may re-export what its rooms hold); a room's references to its
folder do. `--print` lists the edges.

Also fails when a module named in FORBIDDEN imports one it must not (the
layers run one way), and when a module imports its own ancestor: a room
naming its folder's face (`super::Thing` where `Thing` is re-exported by
the folder's `mod.rs`, or `crate::x::Thing` from inside `x/`). A face holds
the doc, `mod` lines and `pub use` re-exports; a room imports the room that
defines what it uses (`super::room::Thing`), so no face is both the home of
a type and the importer of its users (issue 38). Each such edge is printed;
ANCESTOR_EXCEPTIONS lists the ones that remain for now, and an exception
that no longer occurs fails too (remove it). Every path in the file
counts, comments, doc links and `pub(in ...)` included: name the room
there as well.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "src")

# The supervisor's families (one folder or file per syscall family) and
# its backends: families never import each other, backends never import a
# family (they reach one only through the dispatch), and the seam names
# none of them (issue 38).
FAMILIES = [
    "supervisor::exec",
    "supervisor::egress",
    "supervisor::signals",
    "supervisor::files",
    "supervisor::maps",
]
BACKENDS = "supervisor::backend"

# (importer prefix, imported prefix, why): lower layers never reach up.
FORBIDDEN = [
    ("supervisor", "approval", "the supervisor calls approvals through a trait (the seam), never their module"),
    ("tracee", "supervisor", "tracee reads processes; it knows nothing of the supervisor"),
    ("policy", "supervisor", "policy is pure data and decisions"),
    ("audit", "supervisor", "the audit's vocabulary is below the supervisor that writes it"),
] + [
    (a, b, "families never import each other: what two families share lives in the core")
    for a in FAMILIES
    for b in FAMILIES
    if a != b
] + [
    (BACKENDS, f, "a backend reaches a family only through the dispatch")
    for f in FAMILIES
] + [
    ("supervisor::seam", f, "the seam names no family and no backend")
    for f in FAMILIES + [BACKENDS]
] + [
    ("api", "daemon", "the API is below the daemon that serves it (readiness lives below both)"),
    ("api", "cli", "the API is below the command line"),
    ("daemon", "cli", "the daemon is below the command line"),
]

# The top of the house, highest first: no module outside it imports one of
# these (the SEQPACKET transport, the peer limits and readiness live below
# api and handoff).
TOP = ["cli", "daemon", "api"]

# (room, its ancestor) edges still allowed: rooms that import their folder's
# face, to be moved to the rooms that define what they use (issue 38).
ANCESTOR_EXCEPTIONS = []


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts in (["lib"], ["main"]):
        return ()
    return tuple(parts)


def strip_tests(text):
    # Inline test modules run to the end of the file by convention here.
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def expand(prefix, tail):
    """`prefix::{a, b::c}` -> [prefix::a, prefix::b::c]; plain paths as is."""
    out = []
    if tail.startswith("{"):
        depth, cur, items = 0, "", []
        for ch in tail[1:]:
            if ch == "{":
                depth += 1
            elif ch == "}":
                if depth == 0:
                    break
                depth -= 1
            if ch == "," and depth == 0:
                items.append(cur)
                cur = ""
            else:
                cur += ch
        items.append(cur)
        for it in items:
            it = it.strip()
            if it:
                out.extend(expand(prefix, it))
        return out
    path = re.match(r"[\w:]*", tail).group(0).strip(":")
    out.append(prefix + ([p for p in path.split("::") if p] if path else []))
    return out


def main():
    modules = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs" or f.endswith("_tests.rs"):
                continue
            p = os.path.join(dirpath, f)
            modules[module_of(p)] = p
    known = set(modules)

    def resolve(parts):
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in known:
                return tuple(parts[:n])
        return None

    edges = {m: set() for m in modules}
    ref = re.compile(r"\b(crate|super)((?:::super)*)::(\{[^;]*?\}|[\w:]+(?:::\{[^;]*?\})?)", re.S)
    for mod, path in modules.items():
        text = strip_tests(open(path).read())
        # super:: is relative to the module's parent.
        for kind, supers, tail in ref.findall(text):
            if kind == "crate":
                base = []
            else:
                ups = 1 + supers.count("super")
                base = list(mod[: max(len(mod) - ups, 0)])
            if "::{" in tail and not tail.startswith("{"):
                head, rest = tail.split("::{", 1)
                targets = expand(base + head.split("::"), "{" + rest)
            else:
                targets = expand(base, tail)
            for t in targets:
                r = resolve(t)
                if r is None or r == mod or r[: len(mod)] == mod and mod != ():
                    continue
                if r == ():
                    continue
                edges[mod].add(r)

    if "--print" in sys.argv:
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print("::".join(m), "->", "::".join(t))

    # Tarjan's strongly connected components.
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

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
                sccs.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)

    bad = False
    for comp in sccs:
        bad = True
        names = ["::".join(c) for c in comp]
        print(f"import circle among {len(comp)} modules: {', '.join(names)}")
        for a in comp:
            for b in sorted(edges[a]):
                if b in comp:
                    print(f"    {'::'.join(a)} -> {'::'.join(b)}")
    for src, dst, why in FORBIDDEN:
        src, dst = tuple(src.split("::")), tuple(dst.split("::"))
        for m in sorted(edges):
            if m[: len(src)] == src:
                for t in sorted(edges[m]):
                    if t[: len(dst)] == dst:
                        bad = True
                        print(f"{'::'.join(m)} imports {'::'.join(t)}: {why}")
    for m in sorted(edges):
        for t in sorted(edges[m]):
            if t[:1] and t[0] in TOP and m[:1] and m[0] not in TOP:
                bad = True
                print(f"{'::'.join(m)} imports {'::'.join(t)}: only the top of the house ({', '.join(TOP)}) imports it")
    allowed = {(tuple(a.split("::")), tuple(b.split("::"))) for a, b in ANCESTOR_EXCEPTIONS}
    seen = set()
    for m in sorted(edges):
        for t in sorted(edges[m]):
            if t and m[: len(t)] == t:
                if (m, t) in allowed:
                    seen.add((m, t))
                    continue
                bad = True
                print(
                    f"{'::'.join(m)} imports {'::'.join(t)}, its own folder's face: "
                    "import the room that defines the name (super::room::Thing)"
                )
    for m, t in sorted(allowed - seen):
        bad = True
        print(
            f"ANCESTOR_EXCEPTIONS lists {'::'.join(m)} -> {'::'.join(t)}, which no longer occurs: "
            "remove it"
        )
    if bad:
        sys.exit(1)
    print(f"import graph: {len(edges)} modules, {sum(len(v) for v in edges.values())} edges, no circle")


if __name__ == "__main__":
    main()
