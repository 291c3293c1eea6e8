"""load_test.py - `parley load` runs in seconds, small numbers, against a
real server (agent messages, batches, open loop with a stalled subscriber,
--faults with REST readers, a --config file of realistic agent turns, a
--trace of every answer, and readers alone on an existing conversation):
each run's JSON report says verdict "pass" and counts no errors, and the
events it says were appended are in the conversations' logs (REST
/events/count). A run against nothing listening fails with a
clear error, and `--help` documents the options.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Api, Server, check  # noqa: E402

PARLEY = os.environ["PARLEY"]
T = 120  # seconds one run may take (ASan builds are slow)


def load(url, *args):
    p = subprocess.run([PARLEY, "load", url, "--json", *args], capture_output=True, text=True,
                       timeout=T)
    check(p.returncode == 0, "parley load %s: exit %d" % (" ".join(args), p.returncode),
          p.stderr[-2000:])
    rep = json.loads(p.stdout)
    check(rep["verdict"] == "pass", "verdict", rep)
    check(rep["errors"] == {}, "errors", rep["errors"])
    for k in ("events_per_s", "ack_ms", "delivery_ms"):
        check(k in rep, "report has " + k, rep)
    for k in ("p50", "p90", "p99", "p999", "max"):
        check(rep["ack_ms"][k] >= 0, "ack_ms." + k, rep["ack_ms"])
    # the log, read back by `load` itself, holds every acked event
    check(rep["log"]["acked"] == rep["events"], "log.acked == events", rep["log"], rep["events"])
    return rep


def config(d):
    path = os.path.join(d, "load.json")
    with open(path, "w") as f:
        json.dump({"conversations": 2, "producers": 2, "subscribers": 3, "readers": 1,
                   "mix": "realistic", "faults": True, "duration": "30s"}, f)
    return path


def logged_total(api):
    """Events in every conversation's log (those `load` made have no other)."""
    st, b = api.call("GET", "/api/conversations/search?limit=100")
    check(st == 200, "search", st, b)
    total = 0
    for c in b["items"]:
        st, n = api.call("GET", "/api/conversations/%s/events/count" % c["id"])
        check(st == 200, "count", st, n)
        total += n
    return total


def logged_total_of(api, cid):
    st, n = api.call("GET", "/api/conversations/%s/events/count" % cid)
    check(st == 200, "count", st, n)
    return n


def main():
    p = subprocess.run([PARLEY, "load", "--help"], capture_output=True, text=True, timeout=T)
    check(p.returncode == 0, "load --help", p.returncode)
    for opt in ("--conversations", "--producers", "--subscribers", "--rate", "--duration",
                "--json"):
        check(opt in p.stdout, "--help documents " + opt)

    with Server() as srv:
        url = "http://127.0.0.1:%d" % srv.port
        api = Api(srv.port)
        before = 0
        runs = [
            ("--conversations", "2", "--producers", "2", "--subscribers", "3",
             "--duration", "1s"),
            ("--conversations", "1", "--producers", "2", "--subscribers", "2",
             "--stalled", "1", "--rate", "300", "--duration", "1s"),
            ("--conversations", "1", "--producers", "1", "--subscribers", "2",
             "--batch", "20", "--event-size", "2000", "--duration", "1s"),
            ("--conversations", "2", "--producers", "2", "--subscribers", "4",
             "--readers", "2", "--faults", "--duration", "2s"),
            # agent turns (parallel tool calls, 0.5-16 KiB outputs) from a config
            # file, with faults and readers; the flag after it wins
            ("--config", config(srv.data), "--duration", "2s"),
        ]
        for args in runs:
            rep = load(url, *args)
            check(rep["events"] > 0, "events appended", rep)
            if "--faults" in args:  # the subscribers were cut, and resumed exactly
                check(rep["faults"]["cuts"] > 0, "connections cut", rep["faults"])
            if "--config" in args:
                check(rep["mix"] == "realistic" and rep["duration_s"] == 2, "config", rep)
            if "--readers" in args:  # pages read at random cursors, each checked by load
                check(rep["reads"] > 0, "pages read", rep["reads"])
            after = logged_total(api)
            # the log may hold more than was acked (a request cut short),
            # never less; `load` itself checks exactly-once per subscriber
            check(after - before >= rep["events"], "acked events in the log", after - before,
                  rep["events"])
            before = after
            print("ok: load %s: %d events" % (" ".join(args), rep["events"]))

        # --trace: a line per answer, in send order, on the monotonic clock
        trace = os.path.join(srv.data, "trace.csv")
        rep = load(url, "--conversations", "3", "--subscribers", "0", "--duration", "1s",
                   "--threads", "2", "--trace", trace)
        with open(trace) as f:
            head, *lines = f.read().splitlines()
        check(head == "sent_s,ack_ms,status,conversation", "trace header", head)
        rows = [line.split(",") for line in lines]
        check(len(rows) == rep["events"], "a line per answer", len(rows), rep["events"])
        sent = [float(r[0]) for r in rows]
        check(sent == sorted(sent), "in send order")
        check(all(r[2] == "201" and 0 <= int(r[3]) < 3 for r in rows), "statuses, conversations")
        check(max(float(r[1]) for r in rows) <= rep["ack_ms"]["max"] + 0.001,
              "no latency above the report's", rep["ack_ms"])
        check(sent[-1] - sent[0] <= rep["duration_s"] + 5, "over the run", sent[0], sent[-1])
        p = subprocess.run([PARLEY, "load", url, "--trace", os.path.join(srv.data, "no", "t")],
                           capture_output=True, text=True, timeout=T)
        check(p.returncode == 2 and "--trace" in p.stderr, "an unwritable trace: bad usage",
              p.returncode, p.stderr)
        before = logged_total(api)
        print("ok: load --trace: %d answers in send order" % len(rows))

        # an existing conversation, read only: readers page the log that is there
        st, info = api.call("GET", "/api/conversations/search?limit=1")
        cid = info["items"][0]["id"]
        rep = load(url, "--conversation", cid, "--producers", "0", "--subscribers", "0",
                   "--readers", "2", "--duration", "1s")
        check(rep["events"] == 0 and rep["reads"] > 0, "pages read, nothing appended", rep)
        pages = rep["reads"]
        check(rep["log"]["events"] == logged_total_of(api, cid), "its whole log read back",
              rep["log"])
        check(logged_total(api) == before, "nothing was added")
        # and written to: its earlier events (a load's too) are not this run's
        rep = load(url, "--conversation", cid, "--producers", "1", "--subscribers", "1",
                   "--duration", "1s")
        check(rep["events"] > 0 and logged_total(api) >= before + rep["events"],
              "appended to the existing log", rep["events"])
        p = subprocess.run([PARLEY, "load", url, "--conversation", "not-an-id"],
                           capture_output=True, text=True, timeout=T)
        check(p.returncode == 2 and "--conversation" in p.stderr, "a bad id is bad usage",
              p.returncode, p.stderr)
        print("ok: load --conversation %s: %d pages read alone, then %d events appended"
              % (cid, pages, rep["events"]))

    p = subprocess.run([PARLEY, "load", url, "--duration", "1s"], capture_output=True, text=True,
                       timeout=T)
    check(p.returncode != 0, "a run against a stopped server fails", p.returncode)
    check(p.stderr.strip() != "", "and says why")
    print("ok: a stopped server:", p.stderr.strip().splitlines()[0])


if __name__ == "__main__":
    main()
