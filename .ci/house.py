#!/usr/bin/env python3
"""The house's measures (issue 38), checked in CI.

Counts, over the production code of the workspace's crates (tests excluded:
`tests.rs`, `*_tests.rs`, inline `#[cfg(test)] mod` blocks, the `tests/`
and `bench/` crates, `tests/` folders):

* files over MAX_FILE lines;
* functions over LONG_FN lines (at most MAX_LONG_FNS of them, none over
  MAX_FN), and whether each opens with a sentence saying why it is long
  (a doc comment containing "Long");
* `Result<_, String>` in server/src (at most MAX_STRING_RESULTS) and in
  server/src/supervisor (none);

and fails when a limit is passed. `--print` lists every long function and
every file over 500 lines.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["server/src", "proto/src", "shim/src", "unixwrap/src"]
MAX_FILE = 700
LONG_FN = 80
MAX_LONG_FNS = 6
MAX_FN = 150
MAX_STRING_RESULTS = 10

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)")


def production_files():
    for crate in CRATES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, crate)):
            if os.sep + "tests" in dirpath[len(ROOT):]:
                continue
            for f in files:
                if not f.endswith(".rs") or f == "tests.rs" or f.endswith("_tests.rs"):
                    continue
                yield os.path.join(dirpath, f)


def strip_tests(lines):
    for i, line in enumerate(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", line) and i + 1 < len(lines) and re.match(r"\s*mod\s+\w+\s*\{", lines[i + 1]):
            return lines[:i]
    return lines


def code_only(line, state):
    """The line without comments and string contents; `state` carries
    an open block comment or raw string across lines."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"] = False
            i = j + 2
            continue
        if state["str"]:
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch == '"' and line[i + 1 : i + 1 + state["hashes"]] == "#" * state["hashes"]:
                state["str"] = False
                i += 1 + state["hashes"]
                continue
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["str"], state["hashes"] = True, len(m.group(1))
            i += len(m.group(0))
            continue
        ch = line[i]
        if ch == '"':
            state["str"], state["hashes"] = True, 0
            i += 1
            continue
        if ch == "'":
            m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def functions(path):
    lines = strip_tests(open(path).read().split("\n"))
    state = {"block": False, "str": False, "hashes": 0}
    code = [code_only(l, state) for l in lines]
    out = []
    for i, l in enumerate(code):
        m = FN.match(l)
        if not m:
            continue
        # Find the body's opening brace (a `;` first: a declaration).
        depth, start, end = 0, None, None
        for j in range(i, len(code)):
            for ch in code[j]:
                if start is None and ch == ";" and depth == 0:
                    end = -1
                    break
                if ch == "{":
                    if start is None:
                        start = j
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if start is not None and depth == 0:
                        end = j
                        break
            if end is not None:
                break
        if end is None or end < 0:
            continue
        # The doc comment above (attributes skipped).
        k = i - 1
        while k >= 0 and lines[k].strip().startswith("#["):
            k -= 1
        doc = []
        while k >= 0 and lines[k].strip().startswith("///"):
            doc.insert(0, lines[k].strip()[3:].strip())
            k -= 1
        out.append((m.group(1), i + 1, end - i + 1, " ".join(doc)))
    return len(lines), out


def main():
    bad = []
    long_fns = []
    big_files = []
    string_results = {}
    for p in production_files():
        rel = os.path.relpath(p, ROOT)
        n, fns = functions(p)
        if n > 500:
            big_files.append((n, rel))
        if n > MAX_FILE:
            bad.append(f"{rel}: {n} production lines (at most {MAX_FILE})")
        for name, line, length, doc in fns:
            if length > LONG_FN:
                long_fns.append((length, f"{rel}:{line}", name, "long" in doc.lower()))
            if length > MAX_FN:
                bad.append(f"{rel}:{line}: fn {name} is {length} lines (at most {MAX_FN})")
        if rel.startswith("server/src"):
            text = "\n".join(strip_tests(open(p).read().split("\n")))
            c = len(re.findall(r"Result<[^<>]*(?:<[^<>]*>[^<>]*)*,\s*String\s*>", text))
            if c:
                string_results[rel] = c
    for length, where, name, why in long_fns:
        if not why:
            bad.append(f"{where}: fn {name} is {length} lines and does not say why it is long")
    if len(long_fns) > MAX_LONG_FNS:
        bad.append(f"{len(long_fns)} functions over {LONG_FN} lines (at most {MAX_LONG_FNS})")
    total = sum(string_results.values())
    if total > MAX_STRING_RESULTS:
        bad.append(f"Result<_, String> {total} times in server/src (at most {MAX_STRING_RESULTS})")
    sup = {k: v for k, v in string_results.items() if k.startswith("server/src/supervisor")}
    for k, v in sorted(sup.items()):
        bad.append(f"{k}: Result<_, String> {v} times (none in the supervisor)")
    if "--print" in sys.argv:
        for n, rel in sorted(big_files, reverse=True):
            print(f"file {n:5} {rel}")
        for length, where, name, why in sorted(long_fns, reverse=True):
            print(f"fn {length:4} {name} {where}{'' if why else '  (says not why)'}")
        for k, v in sorted(string_results.items(), key=lambda kv: -kv[1]):
            print(f"Result<_, String> {v:3} {k}")
    for b in bad:
        print(b)
    print(
        f"house: {len(big_files)} files over 500 lines, {len(long_fns)} functions over {LONG_FN}, "
        f"Result<_, String> {total} in server/src ({sum(sup.values())} in the supervisor)"
    )
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
