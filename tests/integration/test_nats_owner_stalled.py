#!/usr/bin/env python3
"""test_nats_owner_stalled.py - the owner node of a conversation stops
answering (SIGSTOP: its connections stay open, nothing answers) while
another node forwards writes to it (issue 22). The forwards wait for it;
nothing else on the forwarding node does: a creation (which runs in the
thread pool, as the forwards do), a listing and a read of the stalled
conversation answer promptly. Once the owner runs again, every forwarded
append is answered 201 and is in the log once.

And an owner stopped until its lease is over: the other node takes the
conversation over and appends; once the owner runs again, it no longer
answers from its memory of the log: its reads and its WebSocket
subscriber get what the other node appended, and its appends are
forwarded to the new owner.

Starts its own 3-node cluster (nats_cluster.py, free ports) and two
parley nodes on port 0; every process it starts is stopped by it. Nothing
waits with a sleep: every wait polls against a deadline.

    PARLEY=build/parley python3 tests/integration/test_nats_owner_stalled.py
"""
import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import nats_cluster  # noqa: E402
from parley_client import Server, check, run, summary  # noqa: E402
from test_nats_nodes import (acked_index, append, call, create, known, log_ids, msg,  # noqa: E402
                             retrying, ws_events)

FORWARDS = 12      # more than the 4 threads libuv's pool has by default
PROMPT_S = 3.0     # what a request that waits for nothing answers within
DEADLINE_S = 60.0  # anything that should take a second or two


def timed(port, method, path, body=None):
    t0 = time.monotonic()
    st, b = call(port, method, path, body)
    return st, b, time.monotonic() - t0


def stalled_owner(owner, front):
    cid = create(owner.port)
    known(front.port, cid)
    st, b = append(front.port, cid, msg("before"))
    check(st == 201, "an append forwarded to the owner", st, b)

    answers, errors = {}, []

    def forward(eid):
        try:
            answers[eid] = append(front.port, cid, msg(eid))
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    nats_cluster.pause([owner.proc.pid])
    threads = []
    try:
        threads = [threading.Thread(target=forward, args=("f%d" % i,)) for i in range(FORWARDS)]
        for t in threads:
            t.start()
        end = time.monotonic() + DEADLINE_S
        while front.metric("parley_http_forwards") != FORWARDS:
            check(time.monotonic() < end, "every append is forwarded and waits for the owner",
                  front.metric("parley_http_forwards"), answers)
            time.sleep(0.02)  # polling interval, not a synchronization
        # the forwards wait; the front's other work does not
        for what, method, path, body in (
                ("a creation", "POST", "/api/conversations", {}),
                ("a listing", "GET", "/api/conversations/search?limit=10", None),
                ("a read of the stalled conversation", "GET",
                 "/api/conversations/%s/events/search?limit=10" % cid, None)):
            st, b, took = timed(front.port, method, path, body)
            check(st in (200, 201), "%s on the front answers" % what, st, b)
            check(took < PROMPT_S, "%s on the front answers within %.0f s while %d forwards wait"
                  % (what, PROMPT_S, FORWARDS), "%.2f s" % took)
        check(not answers, "no forward was answered while the owner was stopped", answers)
    finally:
        os.kill(owner.proc.pid, signal.SIGCONT)
        for t in threads:
            t.join(DEADLINE_S)
    check(not errors, "every forward got an answer", errors[:1])
    bad = {e: a for e, a in answers.items() if a[0] != 201}
    check(len(answers) == FORWARDS and not bad, "every forward is appended once the owner runs",
          len(answers), bad)
    ids = log_ids(front.port, cid)
    check(sorted(ids) == sorted(["before"] + list(answers)), "the log holds each once", ids)


def lease_lapsed(owner, front, cluster):
    cid = create(owner.port)
    known(front.port, cid)
    st, b = append(owner.port, cid, msg("l0"))
    check(st == 201, "an append on the owner", st, b)
    sock, until = ws_events(owner.port, cid)
    try:
        check(until(1) == ["l0"], "the owner's subscriber has the first event")
        nc = nats_cluster.Client(cluster.url(1))
        nats_cluster.pause([owner.proc.pid])
        try:
            end = time.monotonic() + DEADLINE_S
            while "o1" in nc.leases():
                check(time.monotonic() < end, "the stopped owner's lease ends")
                time.sleep(0.2)  # polling interval, not a synchronization
            for i, eid in enumerate(("l1", "l2")):
                st, b, _ = retrying(front.port, cid, eid, time.monotonic() + DEADLINE_S)
                check(st == 201 and acked_index(b) == i + 1,
                      "the other node takes over and appends %s" % eid, st, b)
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
            nc.close()
        ids = ["l0", "l1", "l2"]
        check(log_ids(front.port, cid) == ids, "the log after the take-over", ids)
        check(log_ids(owner.port, cid) == ids,
              "the old owner reads the log, not its memory of it", log_ids(owner.port, cid))
        check(until(3) == ids, "the old owner's subscriber gets the other node's events")
        st, b, _ = retrying(owner.port, cid, "l3", time.monotonic() + DEADLINE_S)
        check(st == 201 and acked_index(b) == 3, "an append through the old owner", st, b)
        ids.append("l3")
        check(until(4) == ids, "and its subscriber gets it once")
        for n in (owner, front):
            check(log_ids(n.port, cid) == ids, "both nodes read the same log", n.port)
    finally:
        sock.close()


def on_cluster(work, cluster):
    t0 = time.monotonic()
    owner = Server(data=os.path.join(work, "o"), args=["--node-id", "o1"]).start()
    front = Server(data=os.path.join(work, "f"), args=["--node-id", "f1"]).start()
    try:
        run("forwards_wait_nothing_else_does", stalled_owner, owner, front)
        run("owner_back_after_its_lease_ended", lease_lapsed, owner, front, cluster)
        run("no_loop_waits",
            lambda: check(owner.loop_requests() == 0 and front.loop_requests() == 0,
                          "parley_nats_loop_requests_total is 0",
                          owner.loop_requests(), front.loop_requests()))
        run("nodes_stop_cleanly", lambda: (owner.stop(), front.stop()))
    finally:
        for n in (owner, front):
            if n.proc is not None:
                try:
                    os.kill(n.proc.pid, signal.SIGCONT)  # a stopped one must run to stop
                except OSError:
                    pass
            n.cleanup()
    return summary(t0)


def main():
    return nats_cluster.main_on_cluster("parley-owner-stalled.", on_cluster)


if __name__ == "__main__":
    sys.exit(main())
