#!/usr/bin/env python3
"""Checks every TXO_LOG call in the source tree without running it.

A debug build aborts on a bad or repeated field key only when the line is logged; this finds
them in every call, including the ones no test reaches. Each call must have a message that is
one constant text (no printf conversion, no key=value pairs written into it) and fields whose
keys are [a-z0-9_.]+, not ts, level, component, msg or truncated, and unique within the call.

Usage: log_calls_check.py SOURCE_DIR. Prints each problem as file:line and exits 1 if any.
"""
import pathlib
import re
import sys

DIRS = ("src", "cmd", "app", "tools", "tests", "bench", "fuzz")
KEY = re.compile(r"^[a-z0-9_.]+$")
RESERVED = {"ts", "level", "component", "msg", "truncated", "trace_id", "span_id"}
FIELD = re.compile(r'TXO_KV_(?:STR|STRN|I64|U64|F64|BOOL)\(\s*"([^"]*)"')
# test_log.c logs bad and repeated keys on purpose, to test the checks at run time.
SKIP = {"tests/unit/test_log.c"}
CONVERSION = re.compile(r"%[-+ #0-9.*]*[a-zA-Z]")
PAIR = re.compile(r"(^|\s)[a-z_]+=")


def calls(text):
    """Yields (offset, argument text) of each TXO_LOG(...) call."""
    for m in re.finditer(r"\bTXO_LOG\(", text):
        i, depth = m.end(), 1
        while depth > 0 and i < len(text):
            c = text[i]
            if c in "\"'":
                j = i + 1
                while text[j] != c:
                    j += 2 if text[j] == "\\" else 1
                i = j
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        yield m.start(), text[m.end() : i - 1]


def split_args(args):
    """The top-level comma-separated arguments of a call."""
    out, depth, cur, i = [], 0, "", 0
    while i < len(args):
        c = args[i]
        if c in "\"'":
            j = i + 1
            while args[j] != c:
                j += 2 if args[j] == "\\" else 1
            cur += args[i : j + 1]
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    out.append(cur.strip())
    return out


def main():
    root = pathlib.Path(sys.argv[1])
    problems, n_calls = [], 0
    for d in DIRS:
        for path in sorted((root / d).rglob("*.[ch]")):
            if str(path.relative_to(root)) in SKIP:
                continue
            text = path.read_text(errors="replace")
            for offset, args in calls(text):
                if args.strip() == "":
                    continue  # "TXO_LOG()" named in a comment
                n_calls += 1
                where = f"{path.relative_to(root)}:{text.count(chr(10), 0, offset) + 1}"
                parts = split_args(args)
                if len(parts) < 3:
                    problems.append(f"{where}: fewer than level, component and message")
                    continue
                msg = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', parts[2]))
                if CONVERSION.search(msg):
                    problems.append(f"{where}: message has a printf conversion: {msg}")
                if PAIR.search(msg):
                    problems.append(f"{where}: message holds key=value text: {msg}")
                seen = set()
                for part in parts[3:]:
                    m = FIELD.match(part)
                    if m is None:
                        problems.append(f"{where}: not a TXO_KV_* field: {part}")
                        continue
                    key = m.group(1)
                    if not KEY.match(key) or key in RESERVED:
                        problems.append(f"{where}: bad key {key!r}")
                    if key in seen:
                        problems.append(f"{where}: key {key} repeats")
                    seen.add(key)
    for p in problems:
        print(p)
    if n_calls < 100:
        print(f"only {n_calls} TXO_LOG calls found under {root}: wrong directory?")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
