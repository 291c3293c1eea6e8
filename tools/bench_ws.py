#!/usr/bin/env python3
"""bench_ws.py - WebSocket benchmarks of `parley serve` with `parley bench ws`.

Starts a real server on 127.0.0.1 (port 0) on a scratch data directory
(durability full) and runs, each RUNS times, printing medians:

  fanout   1 producer (small events, arrays of 50, HTTP keep-alive), 1,000
           WebSocket subscribers on one conversation: frames delivered per
           second (client included, same machine) and delivery latency
  stalled  the same with one more subscriber that never reads: the others'
           latency, to compare with fanout
  idle     10,000 idle WebSocket connections: the server's RSS growth per
           connection (user space), each run on a fresh server

Standard library only.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile


def scenario(a, name, extra, runs):
    """One scenario on a server of its own."""
    tmp = tempfile.mkdtemp(prefix="parley-bench-ws.")
    log = open(os.path.join(tmp, "serve.log"), "w+")
    srv = subprocess.Popen([a.parley, "serve", "--data", os.path.join(tmp, "data"),
                            "--listen", "127.0.0.1:0", "--log-level", "warn",
                            "--max-connections", str(a.idle + 1000),
                            "--ws-max-subscribers", str(a.idle + 1000)],
                           stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", srv.stdout.readline().strip())
        if not m:
            sys.exit("bench_ws: parley serve did not start")
        out = subprocess.run([a.parley, "bench", "ws", "--port", m.group(1), "--pid",
                              str(srv.pid), "--runs", str(runs), "--json"] + extra,
                             capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        if out.returncode != 0:
            died = srv.poll()
            log.seek(0)
            sys.exit(f"bench_ws: {name} failed"
                     + (f" (the server exited {died})" if died is not None else "")
                     + "; the server's log:\n" + log.read()[-3000:])
        return json.loads(out.stdout)
    finally:
        srv.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=60)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if rc != 0:  # a run that passed on a server that crashed is not a result
            sys.exit(f"bench_ws: parley serve exited {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", default="build/parley", help="the parley binary (a Release build)")
    ap.add_argument("--runs", type=int, default=5, help="runs per scenario (default 5)")
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--events", type=int, default=20000, help="events per fan-out run")
    ap.add_argument("--idle", type=int, default=10000, help="idle connections")
    ap.add_argument("--only", choices=["fanout", "stalled", "idle"], action="append")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server inherits it
    if hard < a.idle + 100:
        sys.exit(f"bench_ws: {a.idle} connections need more than the {hard} open files allowed")
    results = {}
    for name in a.only or ["fanout", "stalled", "idle"]:
        extra = {"fanout": ["--subscribers", str(a.subscribers), "--events", str(a.events)],
                 "stalled": ["--subscribers", str(a.subscribers), "--events", str(a.events),
                             "--stalled", "1"],
                 "idle": ["--subscribers", str(a.idle), "--idle", "1"]}[name]
        print(f"  {name}: {' '.join(extra)}", file=sys.stderr)
        if name != "idle":
            results[name] = scenario(a, name, extra, a.runs)
            continue
        # memory is measured on a fresh server each time: a second run
        # would reuse what the first one freed
        rs = [scenario(a, name, extra, 1) for _ in range(a.runs)]
        rs.sort(key=lambda r: r["bytes_per_idle_connection"])
        results[name] = rs[len(rs) // 2]
    print(json.dumps(results))
    f, s, i = results.get("fanout"), results.get("stalled"), results.get("idle")
    if f:
        print(f"fan-out, {f['subscribers']} subscribers: {f['frames_per_s']:,.0f} frames/s, "
              f"delivery p50 {f['delivery_ms']['p50']:.2f} ms, p99 {f['delivery_ms']['p99']:.2f} ms")
    if s:
        print(f"with 1 stalled subscriber: {s['frames_per_s']:,.0f} frames/s, "
              f"p50 {s['delivery_ms']['p50']:.2f} ms, p99 {s['delivery_ms']['p99']:.2f} ms"
              + (f" (p99 {100 * (s['delivery_ms']['p99'] / f['delivery_ms']['p99'] - 1):+.1f} %)"
                 if f else ""))
    if i:
        print(f"{i['connections']:,} idle connections: {i['bytes_per_idle_connection']:,.0f} "
              "bytes each")


if __name__ == "__main__":
    main()
