#!/usr/bin/env python3
"""Refresh the README's tool examples from the current binary.

Each example in README.md is a ```jsonc block with `// arguments` (one JSON line) and
`// answer (abridged)` (JSON). This script calls the tool with those arguments over MCP stdio
(`moe-skills serve`) and rewrites every value the abridged answer shows with the value at the
same place in the real answer: the abridgement (which keys, how many list items, `"…"`) stays
as written, the numbers and texts become this version's. A text cut with `…` is cut at the
same length. Exits 1 when a shown key no longer exists in the answer (the README needs a hand
edit there).

Usage: scripts/readme-examples.py [--binary target/debug/moe-skills] [--check]
  --check  report what would change, write nothing (exit 1 if anything would)
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_stdio  # noqa: E402  (the scripts' shared MCP client)

BLOCK = re.compile(
    r"(### `(?P<tool>[a-z_]+)`\n\n```jsonc\n// arguments\n)(?P<args>.*?)\n"
    r"(?P<mid>// answer \(abridged\)\n)(?P<answer>.*?)(?P<end>\n```)",
    re.S,
)


class Missing(Exception):
    pass


def call_tools(binary, calls):
    return [result.get("structuredContent")
            for result in mcp_stdio.call_tools(binary, calls, "readme-examples")]


def refresh(shown, real, path="answer"):
    """`shown` with each value replaced by `real`'s at the same place."""
    if isinstance(shown, dict):
        if not isinstance(real, dict):
            raise Missing(path)
        out = {}
        for key, value in shown.items():
            if key not in real:
                raise Missing(f"{path}.{key}")
            out[key] = refresh(value, real[key], f"{path}.{key}")
        return out
    if isinstance(shown, list):
        if not isinstance(real, list):
            raise Missing(path)
        out = []
        for i, value in enumerate(shown):
            if value == "…":
                out.append(value)
                continue
            # Items with an `id` are matched by it; others by position.
            match = None
            if isinstance(value, dict) and "id" in value:
                match = next((r for r in real if isinstance(r, dict) and r.get("id") == value["id"]), None)
            elif i < len(real):
                match = real[i]
            if match is None:
                raise Missing(f"{path}[{i}]")
            out.append(refresh(value, match, f"{path}[{i}]"))
        return out
    if isinstance(shown, str) and shown.endswith("…") and isinstance(real, str):
        # The cut keeps as many characters as the shown text before its " …" (the space is
        # the cut's own), so a refreshed cut is stable from run to run.
        keep = len(shown[:-1].rstrip())
        if len(real) <= keep:
            return real
        cut = real[:keep]
        # A cut that lands inside a word keeps the whole word, as it was shown.
        while len(cut) < len(real) and not real[len(cut)].isspace():
            cut += real[len(cut)]
        return cut.rstrip() + " …"
    if isinstance(shown, float) and isinstance(real, (int, float)) and not isinstance(real, bool):
        # As many decimals as the README shows.
        text = repr(shown)
        decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 3
        return round(float(real), decimals)
    return real


def dump(value, indent=0):
    """JSON with two-space indentation; lists of plain values stay on one line."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dump(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value) and len(json.dumps(value, ensure_ascii=False)) <= 80:
            return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        if not value:
            return "[]"
        items = [f"{inner}{dump(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


def split_comments(answer):
    """The answer without `// comments`, and the comments with the key of their line."""
    lines, comments = [], []
    for line in answer.split("\n"):
        code, sep, comment = line.partition("  // ")
        if sep:
            comments.append((code.strip().split(":")[0], comment))
        lines.append(code.rstrip() if sep else line)
    return "\n".join(lines), comments


def with_comments(text, comments):
    """Puts each comment back on the first line after the previous one with its key."""
    out, pending = [], list(comments)
    for line in text.split("\n"):
        if pending and line.strip().split(":")[0] == pending[0][0]:
            line = f"{line}  // {pending.pop(0)[1]}"
        out.append(line)
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/debug/moe-skills")
    parser.add_argument("--readme", default="README.md")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = open(args.readme, encoding="utf-8").read()
    blocks = list(BLOCK.finditer(text))
    calls = [(m["tool"], json.loads(m["args"])) for m in blocks]
    answers = call_tools(args.binary, calls)
    out, last, changed, failed = [], 0, [], False
    for m, real in zip(blocks, answers):
        body, comments = split_comments(m["answer"])
        shown = json.loads(body)
        try:
            fresh = refresh(shown, real)
        except Missing as gone:
            print(f"{m['tool']}: {gone} is no longer in the answer; edit this example by hand")
            failed = True
            fresh = shown
        if fresh != shown:
            changed.append(m["tool"])
        out.append(text[last:m.start("answer")])
        out.append(with_comments(dump(fresh), comments))
        last = m.end("answer")
    out.append(text[last:])
    print("changed:", ", ".join(changed) or "nothing")
    if not args.check:
        open(args.readme, "w", encoding="utf-8").write("".join(out))
    sys.exit(1 if failed or (args.check and changed) else 0)


if __name__ == "__main__":
    main()
