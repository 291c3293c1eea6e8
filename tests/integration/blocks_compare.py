#!/usr/bin/python3
"""blocks_compare.py VECTOR ACTUAL: exit 0 if ACTUAL (parley blocks' output)
equals VECTOR's expected state, comparing as vectors/reducer/README.md says
(ignore_fields are JSON Pointers into expected, '*' any index, deleted from
both); else print where they differ and exit 1."""
import json
import sys


def strip(node, segs):
    if not segs:
        return
    head, rest = segs[0], segs[1:]
    if isinstance(node, list):
        keys = range(len(node) - 1, -1, -1) if head == "*" else [int(head)] if head.isdigit() else []
        for k in keys:
            if k >= len(node):
                continue
            if rest:
                strip(node[k], rest)
            else:
                del node[k]
    elif isinstance(node, dict) and head in node:
        if rest:
            strip(node[head], rest)
        else:
            del node[head]


def main():
    vec = json.load(open(sys.argv[1]))
    got = json.load(open(sys.argv[2]))
    want = vec["expected"]
    for p in vec.get("ignore_fields", []):
        segs = [s.replace("~1", "/").replace("~0", "~") for s in p.split("/")[1:]]
        strip(want, segs)
        strip(got, segs)
    if got != want:
        print("expected: " + json.dumps(want, sort_keys=True)[:3000])
        print("got:      " + json.dumps(got, sort_keys=True)[:3000])
        return 1
    return 0


sys.exit(main())
