#!/usr/bin/env python3
"""import_rate.py - `parley import` of a large Claude Code transcript: a
synthetic session of N turns (a user message, an assistant's text and tool
call in one API message, the tool's result of up to 4 KiB, a closing text),
in the JSONL shape of ../shared/vectors/reducer/claude_*.json, imported into
a fresh data directory in-process (--data) and into a running `parley
serve` (--url). Prints medians over --runs of the wall time, lines/s, events
in the log per second and MB/s of transcript.

Usage: bench/import_rate.py [--parley BUILD/parley] [--turns 25000] [--runs 3]
Standard library only.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SESSION = "7c1e0f52-3a9d-4b8e-9f21-0a6d5c4b3e21"


def line(kind, uid, parent, ts, message):
    return {"parentUuid": parent, "isSidechain": False, "userType": "external",
            "cwd": "/home/dev/project", "sessionId": SESSION, "version": "2.0.73",
            "gitBranch": "main", "type": kind, "message": message, "uuid": uid, "timestamp": ts}


def transcript(path, turns):
    rnd = random.Random(3)
    words = "the a file test build run parse list check read write".split()
    lines, parent, n = 0, None, 0

    def text(k):
        return " ".join(rnd.choice(words) for _ in range(k))

    with open(path, "w") as f:
        for t in range(turns):
            ts = "2025-06-02T%02d:%02d:%02d.000Z" % (t // 3600 % 24, t // 60 % 60, t % 60)
            out = []
            uid = "u%07d-0000-4000-8000-000000000000" % t
            out.append(line("user", uid, parent, ts, {"role": "user", "content": text(30)}))
            mid, call = "msg_%07d" % t, "toolu_%07d" % t
            model = {"model": "claude-sonnet-4-5", "id": mid, "type": "message",
                     "role": "assistant"}
            a1 = "a%07d-0000-4000-8000-000000000001" % t
            out.append(line("assistant", a1, uid, ts,
                            dict(model, content=[{"type": "text", "text": text(40)}])))
            a2 = "a%07d-0000-4000-8000-000000000002" % t
            out.append(line("assistant", a2, a1, ts, dict(model, content=[
                {"type": "tool_use", "id": call, "name": "Bash",
                 "input": {"command": "ls -la /tmp/%d" % t, "description": "list"}}])))
            r = "r%07d-0000-4000-8000-000000000003" % t
            out.append(line("user", r, a2, ts, {"role": "user", "content": [
                {"tool_use_id": call, "type": "tool_result", "content": text(rnd.randint(100, 600))}]}))
            a3 = "a%07d-0000-4000-8000-000000000004" % t
            out.append(line("assistant", a3, r, ts, dict(model, id=mid + "b", content=[
                {"type": "text", "text": text(60)}])))
            parent = a3
            for o in out:
                f.write(json.dumps(o) + "\n")
            lines += len(out)
            n += 5
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parley", default=os.path.join("build", "parley"))
    ap.add_argument("--turns", type=int, default=25000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="parley-import-bench.")
    try:
        path = os.path.join(tmp, "session.jsonl")
        lines = transcript(path, a.turns)
        size = os.path.getsize(path)
        results = {"data": [], "url": []}
        for run in range(a.runs):
            data = os.path.join(tmp, "d%d" % run)
            t0 = time.monotonic()
            p = subprocess.run([a.parley, "import", path, "--data", data],
                               capture_output=True, timeout=1800)
            results["data"].append(time.monotonic() - t0)
            if p.returncode != 0:
                sys.exit("import --data failed: %s" % p.stderr.decode()[-500:])
            sdata = os.path.join(tmp, "s%d" % run)
            srv = subprocess.Popen([a.parley, "serve", "--data", sdata, "--listen",
                                    "127.0.0.1:0", "--log-level", "warn"], stdout=subprocess.PIPE)
            try:
                port = int(srv.stdout.readline().decode().rsplit(":", 1)[1])
                t0 = time.monotonic()
                p = subprocess.run([a.parley, "import", path, "--url",
                                    "http://127.0.0.1:%d" % port], capture_output=True, timeout=1800)
                results["url"].append(time.monotonic() - t0)
                if p.returncode != 0:
                    sys.exit("import --url failed: %s" % p.stderr.decode()[-500:])
            finally:
                srv.terminate()
                srv.wait()
        print("parley import of a Claude transcript: %d lines, %.1f MB, %d turns; medians of %d"
              % (lines, size / 1e6, a.turns, a.runs))
        for mode in ("data", "url"):
            t = statistics.median(results[mode])
            print("  --%-4s  %.2f s: %.0f lines/s, %.1f MB/s" % (mode, t, lines / t, size / 1e6 / t))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
