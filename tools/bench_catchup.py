#!/usr/bin/env python3
"""bench_catchup.py - how fast `parley tail` catches up with a long history.

Starts a real `parley serve` on 127.0.0.1 (port 0, scratch data directory,
durability full), builds one conversation of EVENTS (default 100,000) small
agent messages through the producer route (arrays of 100), then, each RUNS
times, printing medians:

  scratch  `parley tail URL ID --from-start --json` with no local copy: the
           time to hold the whole log, events/s, REST requests
  missed   a copy (--cache) that lacks the last MISSED (default 1,000)
           events: the time and requests to get them
  nothing  the same copy with nothing missed: what loading the cache file
           (every line parsed) costs, the floor of `missed`

and compares the requests with the upstream client's reconcile, which
re-downloads the whole history (EVENTS / 100 pages) every time.

Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 201:
        sys.exit("bench_catchup: %s: %d %s" % (path, r.status, data[:200]))
    return json.loads(data)


def msg(i):
    return {"kind": "MessageEvent", "source": "agent",
            "llm_message": {"role": "assistant",
                            "content": [{"type": "text", "text": "event %d " % i + "x" * 64}]}}


def append(port, cid, first, n):
    path = "/api/conversations/%s/events/append" % cid
    for at in range(first, first + n, 100):
        post(port, path, [msg(i) for i in range(at, min(at + 100, first + n))])


def tail(a, url, cid, cache=None):
    cmd = [a.parley, "tail", url, cid, "--json", "--stats"]
    cmd += ["--cache", cache] if cache else ["--from-start"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("bench_catchup: tail failed: " + r.stderr)
    m = re.search(r"stats (\{.*\})", r.stderr)
    return dt, json.loads(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", default="build/parley", help="the parley binary (a Release build)")
    ap.add_argument("--runs", type=int, default=5, help="runs per scenario (default 5)")
    ap.add_argument("--events", type=int, default=100000)
    ap.add_argument("--missed", type=int, default=1000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="parley-bench-catchup.")
    srv = subprocess.Popen([a.parley, "serve", "--data", os.path.join(tmp, "data"),
                            "--listen", "127.0.0.1:0", "--log-level", "warn"],
                           stdout=subprocess.PIPE, text=True)
    try:
        m = re.match(r"listening on (http://127\.0\.0\.1:(\d+))$", srv.stdout.readline().strip())
        if not m:
            sys.exit("bench_catchup: parley serve did not start")
        url, port = m.group(1), int(m.group(2))
        cid = post(port, "/api/conversations", {"stuck_detection": False})["id"]
        print("building %d events ..." % a.events, file=sys.stderr)
        append(port, cid, 0, a.events)

        runs = [tail(a, url, cid) for _ in range(a.runs)]
        s_time = statistics.median(r[0] for r in runs)
        s_req = statistics.median(r[1]["requests"] for r in runs)
        n = runs[0][1]["events"]
        print("scratch: %d events in %.2f s (median of %d): %.0f events/s, %d requests"
              % (n, s_time, a.runs, n / s_time, s_req))

        missed = []
        cache = os.path.join(tmp, "copy.ndjson")
        total = a.events
        for i in range(a.runs):
            tail(a, url, cid, cache)  # the copy, up to date
            append(port, cid, total, a.missed)
            total += a.missed
            missed.append(tail(a, url, cid, cache))
        m_time = statistics.median(r[0] for r in missed)
        m_req = statistics.median(r[1]["requests"] for r in missed)
        nothing = [tail(a, url, cid, cache) for _ in range(a.runs)]
        n_time = statistics.median(r[0] for r in nothing)
        upstream = (total + 99) // 100
        print("missed: %d of %d events in %.3f s (median of %d), %d requests "
              "(upstream full re-download: %d requests, %.0fx more)"
              % (a.missed, total, m_time, a.runs, m_req, upstream, upstream / m_req))
        print("nothing missed: %.3f s (median of %d), %d request: the cache's %d lines loaded"
              % (n_time, a.runs, statistics.median(r[1]["requests"] for r in nothing), total))
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
