#!/usr/bin/env python3
"""The server's module import graph: no circle, layers one way (issues 23, 38, 58).

Reads every module of server/src (a file is a module: `a/b.rs` and
`a/b/mod.rs` are `a::b`), finds the modules each one names through
`crate::...` and `super::...` paths (tests excluded: `tests.rs`,
`*_tests.rs`, and inline `mod tests` blocks), and fails when:

* the graph has a strongly connected component of more than one module (a
  circle), printing it. Every edge counts, a folder's face's edges to its
  own rooms included (a face re-exports what its rooms hold; a room that
  reached back to another room through something importing the face would
  close a circle);
* a top-level room has no place in LAYERS, the one ordered list of the
  house's layers (lowest first): a new room must be placed to pass;
* a room imports a room of its own layer or of a layer above it (the
  layers run one way: a room imports only rooms of the layers below);
* a module inside a room imports one it must not (FORBIDDEN: the
  supervisor's families, backends and seam);
* a module imports its own ancestor: a room naming its folder's face
  (`super::Thing` where `Thing` is re-exported by the folder's `mod.rs`, or
  `crate::x::Thing` from inside `x/`). A face holds the doc, `mod` lines
  and `pub use` re-exports; a room imports the room that defines what it
  uses (`super::room::Thing`). ANCESTOR_EXCEPTIONS lists the ones that
  remain for now, and an exception that no longer occurs fails too.

Every path in the file counts, comments, doc links and `pub(in ...)`
included: name the room there as well. `--print` lists the edges;
`--layers` prints the layers with each room's imports; `--root DIR` reads
another copy of server/src (the tests give it one with a bad import).
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

# The house's layers, lowest first; every top-level room of server/src has
# a place. A room imports only rooms of the layers below its own (rooms of
# one layer are peers and import none of each other). docs/architecture.md
# draws the same list.
LAYERS = [
    ("foundations", ["hex", "laps", "inotify", "transport", "limits", "otlp", "vocab"]),
    ("reading a process", ["tracee"]),
    ("settings and telling a caller why", ["config", "explain"]),
    ("decisions (pure)", ["policy"]),
    ("what the policy compiles to", ["filter", "trees"]),
    ("the record", ["audit"]),
    ("mechanisms beside the supervisor", ["cgroup", "dns"]),
    ("the supervisor", ["supervisor"]),
    ("what feeds, holds and serves the supervisor", ["approval", "proxy", "replay", "session", "detect", "handoff"]),
    ("readiness and installing", ["readiness", "installer"]),
    ("the API", ["api"]),
    ("the daemon", ["daemon"]),
    ("the command line", ["cli"]),
]

# (importer prefix, imported prefix, why): what the layers do not say,
# inside the supervisor.
FORBIDDEN = [
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
]

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
    global ROOT
    if "--root" in sys.argv:
        ROOT = sys.argv[sys.argv.index("--root") + 1]
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
                if r is None or r == mod:
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
    layer_of = {}
    for i, (_, rooms) in enumerate(LAYERS):
        for room in rooms:
            layer_of[room] = i
    rooms = sorted({m[0] for m in edges if m})
    for room in rooms:
        if room not in layer_of:
            bad = True
            print(f"room {room} has no place in LAYERS (.ci/import-graph.py): put it in the layer it belongs to")
    for room in sorted(set(layer_of) - set(rooms)):
        bad = True
        print(f"LAYERS names {room}, which is no room of server/src: remove it")
    for m in sorted(edges):
        for t in sorted(edges[m]):
            if not m or not t or m[0] == t[0] or m[0] not in layer_of or t[0] not in layer_of:
                continue
            lm, lt = layer_of[m[0]], layer_of[t[0]]
            if lt >= lm:
                bad = True
                where = "its own layer" if lt == lm else f"a layer above ({LAYERS[lt][0]})"
                print(
                    f"{'::'.join(m)} imports {'::'.join(t)}: {t[0]} is in {where}, not below "
                    f"{m[0]} ({LAYERS[lm][0]}); move the shared part down or reach it through a seam"
                )
    if "--layers" in sys.argv:
        for i, (name, rs) in enumerate(LAYERS):
            print(f"{i:2} {name}")
            for room in rs:
                deps = sorted({t[0] for m in edges if m and m[0] == room for t in edges[m] if t and t[0] != room})
                print(f"     {room} -> {', '.join(deps) or '(nothing)'}")
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
    print(
        f"import graph: {len(edges)} modules, {sum(len(v) for v in edges.values())} edges, "
        f"{len(rooms)} rooms in {len(LAYERS)} layers, no circle, no arrow up"
    )


if __name__ == "__main__":
    main()
