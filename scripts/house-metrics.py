#!/usr/bin/env python3
"""The size limits of docs/architecture.md, measured: source files over 1,000 lines and
functions over 200 lines (Rust, C, CUDA, Python, shell), in the files git tracks.

    python3 scripts/house-metrics.py            # list what is over, exit 1 if anything is
    python3 scripts/house-metrics.py --top 20   # the 20 longest functions, over or not

A file or function that is a table of data may say so with a comment containing
`house-metrics: table` on its first line (files) or on the line before the `fn` (functions);
it is listed as excepted, not as over. Generated files (kernels/ptx/) are not source.
"""
import re
import subprocess
import sys

FILE_LIMIT = 1000
FN_LIMIT = 200
EXT = (".rs", ".c", ".h", ".cu", ".cuh", ".py", ".sh")
GENERATED = ("kernels/ptx/", "fixtures/")

FN_RE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z0-9_]+)")


def strip_strings(line, state):
    """Removes string and char literal contents and // comments; tracks block comments and
    raw strings across lines (state: dict). Good enough for brace counting."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if state.get("block"):
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"] = False
            i = j + 2
            continue
        if state.get("raw") is not None:
            end = '"' + "#" * state["raw"]
            j = line.find(end, i)
            if j < 0:
                return "".join(out)
            state["raw"] = None
            i = j + len(end)
            continue
        if state.get("str"):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] == '"':
                state["str"] = False
            i += 1
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["raw"] = len(m.group(1))
            i += m.end()
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
            if m:
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def rust_functions(path, lines):
    state = {}
    res = []
    stack = []  # (name, start_line, depth_at_open)
    depth = 0
    pending = None
    for no, line in enumerate(lines, 1):
        clean = strip_strings(line, state)
        m = FN_RE.match(line)
        if m and not state.get("str"):
            excepted = no > 1 and "house-metrics: table" in lines[no - 2]
            pending = (m.group(7), no, excepted)
        for ch in clean:
            if ch == "{":
                if pending is not None:
                    stack.append((pending[0], pending[1], depth, pending[2]))
                    pending = None
                depth += 1
            elif ch == "}":
                depth -= 1
                if stack and stack[-1][2] == depth:
                    name, start, _, exc = stack.pop()
                    res.append((no - start + 1, f"{path}:{start}", name, exc))
            elif ch == ";" and pending is not None and depth >= 0:
                pending = None  # a declaration without a body
    return res


def main():
    top = 0
    if "--top" in sys.argv:
        top = int(sys.argv[sys.argv.index("--top") + 1])
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    over = 0
    fns = []
    for f in files:
        if not f.endswith(EXT) or f.startswith(GENERATED):
            continue
        try:
            text = open(f, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        table = lines and "house-metrics: table" in lines[0]
        if len(lines) > FILE_LIMIT:
            if table:
                print(f"excepted file ({len(lines)} lines, a table): {f}")
            else:
                print(f"file over {FILE_LIMIT} lines: {f} ({len(lines)})")
                over += 1
        if f.endswith(".rs"):
            fns.extend(rust_functions(f, lines))
    fns.sort(reverse=True)
    for n, where, name, exc in fns:
        if n > FN_LIMIT:
            if exc:
                print(f"excepted function ({n} lines, a table): {where} {name}")
            else:
                print(f"function over {FN_LIMIT} lines: {where} {name} ({n})")
                over += 1
    if top:
        print(f"the {top} longest functions:")
        for n, where, name, exc in fns[:top]:
            print(f"  {n:5} {where} {name}")
    print(f"{over} over the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
