#!/usr/bin/env python3
"""bench_http.py - HTTP benchmarks of `parley serve` with wrk (Debian).

Starts a real server on 127.0.0.1 (port 0) on a scratch data directory,
prepares the data over the REST API, then runs wrk RUNS times per scenario
and prints the median requests/s (and p50/p99 latency):

  append   POST .../events/append, 1 KiB events, 64 keep-alive connections
           spread over 64 conversations, durability full
  search   GET .../events/search?limit=100 at random cursors (event ids) of a
           100k-event conversation
  alive    GET /alive

Every run must answer 2xx only; a run with errors fails the benchmark.
Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def start_server(parley, data, workers, durability):
    p = subprocess.Popen([parley, "serve", "--data", data, "--listen", "127.0.0.1:0",
                          "--workers", str(workers), "--durability", durability,
                          "--log-level", "warn"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line)
    if not m:
        p.kill()
        sys.exit(f"bench_http: unexpected first line from parley serve: {line!r}")
    return p, int(m.group(1))


def call(conn, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.read()
    if r.status >= 300:
        sys.exit(f"bench_http: {method} {path} -> {r.status} {out[:200]!r}")
    return json.loads(out) if out else None


def message(i, size):
    text = ("event %d " % i).ljust(size, "x")
    return {"source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def event_body(size):
    """A ~size-byte agent message as stored (the text pads it)."""
    e = message(0, 1)
    base = len(json.dumps(e, separators=(",", ":"))) + 120  # id, timestamp, parent_id
    return message(0, max(1, size - base))


def run_wrk(port, conns, threads, duration, script, path):
    args = ["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{duration}s", "--latency"]
    if script:
        args += ["-s", script]
    args.append(f"http://127.0.0.1:{port}{path}")
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    if bad or (errs and "timeout 0" not in errs.group(1)):
        sys.exit("bench_http: wrk saw errors:\n" + out)

    def pct(p):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)" % p, out, re.M)
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v

    return rps, pct(50), pct(99)


def median_runs(name, runs, fn):
    res = []
    for i in range(runs):
        res.append(fn())
        print(f"  {name} run {i + 1}/{runs}: {res[-1][0]:,.0f} req/s", file=sys.stderr)
    return {"rps": statistics.median(r[0] for r in res),
            "p50_ms": statistics.median(r[1] for r in res),
            "p99_ms": statistics.median(r[2] for r in res)}


def lua(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def append_script(path, conv_ids, body):
    """A wrk script posting body to each conversation's append route in turn."""
    paths = ",".join('"/api/conversations/%s/events/append"' % i for i in conv_ids)
    return lua(path, """
local paths = {%s}
local n = 0
wrk.method = "POST"
wrk.body = '%s'
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  return wrk.format(nil, paths[(n %% #paths) + 1])
end
""" % (paths, body.replace("'", "\\'")))


def search_script(path, cid, event_ids):
    """A wrk script paging cid's events/search from cursors picked at random."""
    return lua(path, """
local ids = {%s}
local base = "/api/conversations/%s/events/search?limit=100&page_id="
math.randomseed(7)
request = function()
  return wrk.format("GET", base .. ids[math.random(#ids)])
end
""" % (",".join('"%s"' % i for i in event_ids), cid))


def fill(conn, cid, n, size):
    """Append n agent messages of size bytes of text; -> their ids."""
    ids = []
    for first in range(0, n, 500):
        batch = [message(i, size) for i in range(first, min(first + 500, n))]
        got = call(conn, "POST", f"/api/conversations/{cid}/events/append", batch)
        ids += [e["id"] for e in got["events"]]
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", default="build/parley", help="the parley binary (a Release build)")
    ap.add_argument("--runs", type=int, default=5, help="wrk runs per scenario (default 5)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (default 5)")
    ap.add_argument("--workers", type=int, default=0, help="server worker loops (default: cores)")
    ap.add_argument("--events", type=int, default=100000, help="events in the search conversation")
    ap.add_argument("--only", choices=["append", "search", "alive"], action="append",
                    help="run only these scenarios")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    a = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench_http: wrk is missing (tools/bootstrap.sh installs it)")
    scen = a.only or ["append", "search", "alive"]
    tmp = tempfile.mkdtemp(prefix="parley-bench-http.")
    workers = a.workers or os.cpu_count()
    srv, port = start_server(a.parley, os.path.join(tmp, "data"), workers, "full")
    results = {}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        if "append" in scen:
            ids = [call(conn, "POST", "/api/conversations", {})["id"] for _ in range(64)]
            body = json.dumps(event_body(1024), separators=(",", ":"))
            script = append_script(os.path.join(tmp, "append.lua"), ids, body)
            results["append"] = median_runs("append", a.runs, lambda: run_wrk(
                port, 64, 2, a.duration, script, "/"))
        if "search" in scen:
            cid = call(conn, "POST", "/api/conversations", {})["id"]
            print(f"  search: appending {a.events:,} events", file=sys.stderr)
            ev_ids = fill(conn, cid, a.events, 300)
            picks = random.Random(1).sample(ev_ids, min(5000, len(ev_ids)))
            script = search_script(os.path.join(tmp, "search.lua"), cid, picks)
            results["search"] = median_runs("search", a.runs, lambda: run_wrk(
                port, 64, 2, a.duration, script, "/"))
        if "alive" in scen:
            results["alive"] = median_runs("alive", a.runs, lambda: run_wrk(
                port, 64, 2, a.duration, None, "/alive"))
        conn.close()
    finally:
        srv.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        sys.exit(f"bench_http: parley serve exited {rc}")
    if a.json:
        print(json.dumps(results))
    else:
        print(f"{'scenario':<8} {'req/s (median)':>15} {'p50 ms':>8} {'p99 ms':>8}")
        for k, v in results.items():
            print(f"{k:<8} {v['rps']:>15,.0f} {v['p50_ms']:>8.2f} {v['p99_ms']:>8.2f}")


if __name__ == "__main__":
    main()
