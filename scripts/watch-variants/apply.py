#!/usr/bin/env python3
"""Apply one variant patch (a unified diff made with `diff -u`) to progress.cuh, strictly: every
hunk's context and removed lines must match the header where the hunk says, else exit 1 naming
the hunk (the header moved on: remake the patch). No fuzz, no offsets, no `patch` needed.

usage: apply.py HEADER PATCH OUT"""
import re
import sys


def apply(header, patch):
    src = header.splitlines(keepends=True)
    out, at = [], 0  # at: next line of src not yet copied (0-based)
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        i += 1
    while i < len(lines):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", lines[i])
        if not m:
            raise ValueError(f"line {i + 1}: not a hunk header: {lines[i]!r}")
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        if start < at:
            raise ValueError(f"hunk at line {i + 1} overlaps the previous one")
        out.extend(src[at:start])
        at = start
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            tag, text = lines[i][:1], lines[i][1:]
            if tag == "\\":  # "\ No newline at end of file"
                i += 1
                continue
            if tag in (" ", "-"):
                if at >= len(src) or src[at] != text:
                    raise ValueError(f"hunk line {i + 1} does not match header line {at + 1}")
                at += 1
            if tag in (" ", "+"):
                out.append(text)
            i += 1
    out.extend(src[at:])
    return "".join(out)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    header, patch, dest = sys.argv[1:]
    try:
        with open(header) as h, open(patch) as p:
            text = apply(h.read(), p.read())
    except (OSError, ValueError) as e:
        sys.exit(f"apply.py: {patch}: {e}")
    with open(dest, "w") as o:
        o.write(text)


if __name__ == "__main__":
    main()
