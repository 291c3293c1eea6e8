#!/usr/bin/env python3
"""view_state.py - GET /api/conversations/{id}/state on a long conversation:
the first call (the visualizer starts and folds the whole log), a second
whole-state call (folded already), and ?after_index polls (one event
appended, then the changes since the last index), against a real
`parley serve` on 127.0.0.1.

Usage: bench/view_state.py [--parley BUILD/parley] [--events 100000]
       [--runs 3] [--polls 50]
Prints medians over --runs fresh servers. Standard library only.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def cycle(i, rnd):
    """Event i of an agent's turn: the sizes of `parley bench conversation`."""
    text = "".join(rnd.choice("abcdefghij ") for _ in range(64))
    n = i // 4
    if i % 4 == 0:
        return {"id": "e%d" % i, "source": "user", "kind": "MessageEvent",
                "llm_message": {"role": "user", "content": [
                    {"type": "text", "text": text * rnd.randint(6, 15)}]}}
    if i % 4 == 1:
        return {"id": "e%d" % i, "source": "agent", "kind": "ActionEvent",
                "thought": [{"type": "text", "text": text * rnd.randint(6, 18)}],
                "tool_name": "terminal", "tool_call_id": "c%d" % n, "llm_response_id": "r%d" % n,
                "tool_call": {"id": "c%d" % n, "name": "terminal", "arguments": "{}",
                              "origin": "completion"},
                "action": {"kind": "TerminalAction", "command": "ls /tmp/%d" % n}}
    if i % 4 == 2:
        return {"id": "e%d" % i, "source": "environment", "kind": "ObservationEvent",
                "tool_name": "terminal", "tool_call_id": "c%d" % n, "action_id": "e%d" % (i - 1),
                "observation": {"kind": "TerminalObservation", "is_error": False, "content": [
                    {"type": "text", "text": text * rnd.randint(14, 60)}]}}
    return {"id": "e%d" % i, "source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [
                {"type": "text", "text": text * rnd.randint(6, 30)}]}}


class Client:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def call(self, method, path, body=None):
        self.c.request(method, path, body=json.dumps(body) if body is not None else None,
                       headers={"Content-Type": "application/json"})
        r = self.c.getresponse()
        raw = r.read()
        if r.status >= 300:
            sys.exit("%s %s: %d %s" % (method, path, r.status, raw[:200]))
        return raw


def one_run(parley, events, polls):
    data = tempfile.mkdtemp(prefix="parley-view-bench.")
    srv = subprocess.Popen([parley, "serve", "--data", data, "--listen", "127.0.0.1:0",
                            "--log-level", "warn"], stdout=subprocess.PIPE)
    try:
        line = srv.stdout.readline().decode()
        port = int(line.rsplit(":", 1)[1])
        c = Client(port)
        cid = json.loads(c.call("POST", "/api/conversations", {}))["id"]
        rnd = random.Random(7)
        for base in range(0, events, 500):
            c.call("POST", "/api/conversations/%s/events/append" % cid,
                   [cycle(i, rnd) for i in range(base, min(base + 500, events))])
        t0 = time.monotonic()
        body = c.call("GET", "/api/conversations/%s/state" % cid)
        first = time.monotonic() - t0
        t0 = time.monotonic()
        c.call("GET", "/api/conversations/%s/state" % cid)
        second = time.monotonic() - t0
        lat = []
        index = events - 1
        for k in range(polls):
            i = events + k  # an agent message, then the poll for it
            c.call("POST", "/api/conversations/%s/events/append" % cid, [cycle(i - i % 4 + 3, rnd)
                   | {"id": "p%d" % k}])
            t0 = time.monotonic()
            got = json.loads(c.call("GET", "/api/conversations/%s/state?after_index=%d"
                                    % (cid, index)))
            lat.append(time.monotonic() - t0)
            if not got["blocks"]:  # the message (and the status it may change)
                sys.exit("a poll answered no block")
            index = got["index"]
        return first, second, len(body), statistics.median(lat), max(lat)
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parley", default=os.path.join("build", "parley"))
    ap.add_argument("--events", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--polls", type=int, default=50)
    a = ap.parse_args()
    rs = [one_run(a.parley, a.events, a.polls) for _ in range(a.runs)]
    med = [statistics.median(r[i] for r in rs) for i in range(5)]
    print("GET .../state on a %d-event conversation, medians of %d runs:" % (a.events, a.runs))
    print("  first call (visualizer starts, folds the log)  %.2f s (%.1f MB answered)"
          % (med[0], med[2] / 1e6))
    print("  whole state again                              %.2f s" % med[1])
    print("  ?after_index poll after one append             %.2f ms median, %.2f ms max"
          % (med[3] * 1e3, med[4] * 1e3))


if __name__ == "__main__":
    main()
