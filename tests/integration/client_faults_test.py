"""client_faults_test.py - `parley tail --follow` converges under faults
(contract: issue 7): a real `parley serve`, a conversation, and
fault_proxy.FaultProxy between tail and the server, which drops,
duplicates and delays (reorders) WebSocket data frames, cuts WebSocket
connections after a random number of frames, and cuts some plain HTTP
responses (REST repair) in the middle.

  tail http://127.0.0.1:PROXY CID --follow --json --from-start
       --check-interval 200ms --stats [--no-index]

follows while 3 producer threads append agent MessageEvents (arrays of 1-4)
at full speed straight to the server, for a few seconds and a bounded
count, and on until the proxy has made every kind of fault at least once;
some events are there before tail starts. Then the faults are
switched off (held frames released), the server's log is read (REST
search), tail's stdout is awaited until it has that many lines (a
deadline), tail gets SIGTERM and the rest is read. Checked: stdout parsed
as dicts == the log exactly (order, no duplicates, nothing missing), exit
0, the --stats line (events == the log's length, ws_lost >= 1 after a cut), and
that the proxy dropped, duplicated, delayed frames and cut connections.

Rounds: (1) with parley's envelope=index; (2) with --no-index (as against
an upstream OpenHands server); (3) --until-done with the faults left on:
after the producers, execution_status goes running -> finished and tail
must end by itself (exit 0) with stdout == the log, although the frames
that would tell it may be lost; (4) the server restarts (same data, a new
port the proxy then forwards to) and every connection is cut while tail
follows. Seeded RNG (SEED=<int> to repeat a run's fault pattern; the seed
is printed). No sleeps as synchronization: waits are conditions with
deadlines. Usage: PARLEY=<binary> /usr/bin/python3 client_faults_test.py
[index|no-index|until-done|restart ...]
"""

import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_test import Proc, Rest, msg, same, stats_of, status_event  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402
from parley_client import Server, check  # noqa: E402

T = 60                 # seconds for any single wait
PRODUCE_SECONDS = 4.0  # producers stop after this long ...
MAX_EVENTS = 15000     # ... or after this many events in all
PRODUCERS = 3
BEFORE = 150           # events there before tail starts
CONVERGE = 45          # seconds for tail to catch up once the faults are off


def produce(rest, cid, rng_seed, go, counter, errors):
    rng = random.Random(rng_seed)
    try:
        while True:
            n = go(rng.randint(1, 4))
            if n <= 0:
                return
            k = counter.next(n)
            rest.append(cid, [msg("fault %d.%d" % (k, j)) for j in range(n)])
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        errors.append(e)


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def next(self, k):
        with self.lock:
            self.n += k
            return self.n - k


FAULTS = ("dropped", "duplicated", "delayed", "cuts")


def run_producers(srv, cid, seed, proxy):
    """PRODUCERS threads appending for PRODUCE_SECONDS or MAX_EVENTS, and
    on (up to T seconds more) until the proxy has made every kind of fault
    at least once: how many frames a round sees depends on the machine's
    speed, the faults must not. -> events appended."""
    stop_at = time.monotonic() + PRODUCE_SECONDS
    lock, left = threading.Lock(), [MAX_EVENTS]

    def go(want):
        with lock:
            now = time.monotonic()
            if now < stop_at and left[0] > 0:
                n = min(want, left[0])
                left[0] -= n
                return n
            faults = proxy.counters()
            return want if now < stop_at + T and any(faults[k] == 0 for k in FAULTS) else 0

    counter, errors = Counter(), []
    rng = random.Random(seed)
    ts = [threading.Thread(target=produce,
                           args=(Rest(srv.port), cid, rng.getrandbits(32), go, counter, errors))
          for _ in range(PRODUCERS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(PRODUCE_SECONDS + 2 * T)
    check(not errors, "a producer failed", *[repr(e) for e in errors])
    check(all(not t.is_alive() for t in ts), "a producer did not stop")
    return counter.n


def round_(srv, seed, mode):
    """mode: index, no-index (faults off at the end, then SIGTERM), or
    until-done (faults on to the end; tail must stop by itself)."""
    name = {"index": "envelope=index", "no-index": "--no-index",
            "until-done": "--until-done under faults"}[mode]
    rest = Rest(srv.port)
    cid = rest.conversation()
    if mode == "until-done":
        rest.append(cid, status_event("running"))
    for i in range(0, BEFORE, 50):
        rest.append(cid, [msg("before %d" % (i + j)) for j in range(50)])

    proxy = FaultProxy("127.0.0.1", srv.port, seed=seed, p_drop=0.03, p_dup=0.03,
                       p_delay=0.03, delay_max=3, cut_min=150, cut_max=1500,
                       p_cut_http=0.03)
    proxy.start()
    args = ["tail", "http://127.0.0.1:%d" % proxy.port, cid, "--follow", "--json",
            "--from-start", "--check-interval", "200ms", "--stats"]
    if mode == "no-index":
        args.append("--no-index")
    if mode == "until-done":
        args.append("--until-done")
    tail = Proc(*args)
    try:
        # producers only once tail follows (it has the first events)
        tail.wait_lines(1, "%s: tail's first line" % name)
        n = run_producers(srv, cid, seed, proxy)
        t0 = time.monotonic()
        if mode == "until-done":
            rest.append(cid, status_event("finished"))
            log = rest.log(cid)
            try:
                rc = tail.wait(CONVERGE)
            except AssertionError:
                raise AssertionError("%s: tail did not stop within %d s of `finished` (%d of %d "
                                     "lines); stderr: %s" % (name, CONVERGE, tail.count(),
                                                             len(log), tail.stderr()[-1500:]))
            faults = proxy.counters()
            n += 1
        else:
            faults = proxy.counters()
            proxy.faults(False)
            log = rest.log(cid)
            tail.wait_lines(len(log), "%s: convergence after the faults stopped" % name, CONVERGE)
            # no more events: a clean SIGTERM ends it with status 0
            rc = tail.term()
        took = time.monotonic() - t0
        first = 1 if mode == "until-done" else 0
        check(len(log) == first + BEFORE + n, "%s: the server's log has %d events, %d appended"
              % (name, len(log), first + BEFORE + n))
    finally:
        tail.kill()
        proxy.stop()
    err = tail.stderr()
    check(rc == 0, "%s: tail exited %d, wanted 0" % (name, rc), err[-1500:])
    same(tail.events(), log, "%s: tail's stdout vs the server's log" % name)
    s = stats_of(err)
    check(s["events"] == len(log), "%s: stats events %d, log %d" % (name, s["events"], len(log)), s)
    counts = proxy.counters()
    for k in FAULTS:
        check(faults[k] > 0, "%s: the proxy never %s a frame (frames %d) - no WebSocket traffic?"
              % (name, k, faults["frames"]), faults)
    # a cut is seen at once; the reconnect comes after a backoff, and the
    # tail may have converged by REST (and been stopped) before it
    if faults["cuts"]:
        check(s["ws_lost"] >= 1,
              "%s: %d cuts but stats ws_lost 0" % (name, faults["cuts"]), s)
    check(s["frames"] > 0, "%s: stats frames 0" % name, s)
    print("   %s: %d events, %s %.2f s after %s" % (
        name, len(log), "ended" if mode == "until-done" else "converged", took,
        "`finished`" if mode == "until-done" else "the faults stopped"))
    print("   %s: proxy %s" % (name, json.dumps(counts)))
    print("   %s: parley tail: stats %s" % (name, json.dumps(s)))
    print("ok: %s: tail --follow output == the log under drops, duplicates, reorders and cuts"
          % name, flush=True)


def poll(what, cond, timeout=T):
    """Poll cond() every 20 ms until true; fail after timeout s."""
    deadline = time.monotonic() + timeout
    while not cond():
        check(time.monotonic() < deadline, "timed out after %d s waiting for %s" % (timeout, what))
        time.sleep(0.02)  # polling a condition with a deadline, not a synchronization


def restart_round(seed):
    """The server restarts (SIGTERM, then the same data on a new port, which
    the proxy forwards to) while tail follows; every connection is also cut
    once: tail reconnects and prints the events of before and after, each
    once, in order."""
    name = "server restart"
    with Server(workers=2) as srv:
        rest = Rest(srv.port)
        cid = rest.conversation()
        rest.append(cid, [msg("before restart %d" % j) for j in range(100)])
        proxy = FaultProxy("127.0.0.1", srv.port, seed=seed)
        proxy.start()
        tail = Proc("tail", "http://127.0.0.1:%d" % proxy.port, cid, "--follow", "--json",
                    "--from-start", "--check-interval", "200ms", "--stats")
        try:
            tail.wait_lines(100, "%s: the first 100" % name)
            rest.append(cid, [msg("just before %d" % j) for j in range(20)])
            srv.restart()
            proxy.retarget("127.0.0.1", srv.port)
            rest = Rest(srv.port)
            for i in range(0, 200, 10):
                rest.append(cid, [msg("after restart %d" % (i + j)) for j in range(10)])
            tail.wait_lines(320, "%s: the events after the restart" % name, CONVERGE)
            poll("%s: tail's WebSocket after the restart" % name,
                 lambda: proxy.live_websockets() > 0)
            proxy.cut_all()
            check(proxy.counters()["cuts"] >= 1, "%s: no connection to cut" % name)
            rest.append(cid, [msg("after the cut %d" % j) for j in range(30)])
            log = rest.log(cid)
            check(len(log) == 350, "%s: the log has %d events" % (name, len(log)))
            t0 = time.monotonic()
            tail.wait_lines(len(log), "%s: convergence" % name, CONVERGE)
            took = time.monotonic() - t0
            rc = tail.term()
        finally:
            tail.kill()
            proxy.stop()
        err = tail.stderr()
        check(rc == 0, "%s: tail exited %d after SIGTERM" % (name, rc), err[-1500:])
        same(tail.events(), log, "%s: tail's stdout vs the server's log" % name)
        s = stats_of(err)
        check(s["events"] == len(log) and s["reconnects"] >= 1, "%s: stats" % name, s)
        print("   %s: converged %.2f s after the last append; proxy %s" % (
            name, took, json.dumps(proxy.counters())))
        print("   %s: parley tail: stats %s" % (name, json.dumps(s)))
        print("ok: %s: tail --follow reconnects across a restart and a cut, output == the log"
              % name, flush=True)


def main():
    check(os.environ.get("PARLEY"), "PARLEY must point at the parley binary (ctest sets it)")
    seed = int(os.environ.get("SEED") or random.SystemRandom().getrandbits(31))
    print("client_faults_test: seed %d (SEED=%d to repeat)" % (seed, seed), flush=True)
    rounds = sys.argv[1:] or ["index", "no-index", "until-done", "restart"]
    for r in rounds:
        check(r in ("index", "no-index", "until-done", "restart"), "unknown round %r" % r)
    with Server(workers=2) as srv:
        for i, r in enumerate(rounds):
            t0 = time.monotonic()
            if r == "restart":
                restart_round(seed + i)
            else:
                round_(srv, seed + i, r)
            check(srv.died() is None, "serve died", srv.died())
            print("   (%s) took %.1f s" % (r, time.monotonic() - t0), flush=True)
    print("client_faults_test: ok")


if __name__ == "__main__":
    main()
