#!/usr/bin/env python3
"""bench_load.py - `parley load` scenarios against `parley serve`, medians.

Starts a real server on 127.0.0.1 (port 0, scratch data directory,
durability full) for each run and runs `parley load --json` on it, RUNS
times per scenario, printing the medians:

  mix      4 conversations, each: 2 producers posting realistic agent turns
           (user message, 1-3 parallel tool calls, 0.5-16 KiB observations,
           the answer; one all-or-nothing array a turn) as fast as acked,
           50 WebSocket subscribers, 2 REST readers at random cursors
  faults   the same with --faults: every subscriber cuts its connection
           every 100-1,000 frames and resumes with after_id

Every run must end with verdict "pass". Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

SCENARIOS = {
    "mix": ["--conversations", "4", "--producers", "2", "--subscribers", "50",
            "--readers", "2", "--mix", "realistic"],
    "faults": ["--conversations", "4", "--producers", "2", "--subscribers", "50",
               "--readers", "2", "--mix", "realistic", "--faults"],
}


def run(a, args):
    tmp = tempfile.mkdtemp(prefix="parley-bench-load.")
    srv = subprocess.Popen([a.parley, "serve", "--data", os.path.join(tmp, "data"),
                            "--listen", "127.0.0.1:0", "--log-level", "warn"],
                           stdout=subprocess.PIPE, text=True)
    try:
        m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", srv.stdout.readline().strip())
        if not m:
            sys.exit("bench_load: parley serve did not start")
        r = subprocess.run([a.parley, "load", m.group(1), "--json", "--duration", a.duration,
                            "--server-pid", str(srv.pid)] + args,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("bench_load: parley load failed: " + r.stdout[-2000:] + r.stderr[-2000:])
        return json.loads(r.stdout)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", default="build/parley", help="the parley binary (a Release build)")
    ap.add_argument("--runs", type=int, default=3, help="runs per scenario (default 3)")
    ap.add_argument("--duration", default="10s", help="of each run (default 10s)")
    a = ap.parse_args()
    print("scenario  events/s  frames/s  pages/s  ack p50/p99 ms  delivery p50/p99 ms  "
          "server CPU s  cuts")
    for name, args in SCENARIOS.items():
        reps = []
        for i in range(a.runs):
            print("%s run %d/%d ..." % (name, i + 1, a.runs), file=sys.stderr)
            reps.append(run(a, args))

        def med(f):
            return statistics.median(f(r) for r in reps)
        print("%-8s %9.0f %9.0f %8.0f  %6.1f / %-6.1f  %8.1f / %-8.1f  %11.1f  %5.0f"
              % (name, med(lambda r: r["events_per_s"]), med(lambda r: r["frames_per_s"]),
                 med(lambda r: r["reads_per_s"]), med(lambda r: r["ack_ms"]["p50"]),
                 med(lambda r: r["ack_ms"]["p99"]), med(lambda r: r["delivery_ms"]["p50"]),
                 med(lambda r: r["delivery_ms"]["p99"]), med(lambda r: r["server"]["cpu_s"]),
                 med(lambda r: r["faults"]["cuts"])))


if __name__ == "__main__":
    main()
