#!/usr/bin/env python3
"""test_nats_stall.py - a parley node whose NATS cluster stalls or dies
(issue 22): its loops are never blocked, appends are refused with 503 and
a reason that names the cluster, and once the cluster is back appends work
again without restarting parley, with no acknowledged event lost or
stored twice.

Starts its own 3-node cluster (nats_cluster.py, free ports) and one
`parley serve --store` on it; every process it starts is stopped by it.
Two outages: every nats-server SIGSTOPped (a stalled cluster: connections
open, nothing answers), then every nats-server SIGKILLed and started again
(same ports, same data). Nothing waits with a sleep: every wait polls
against a deadline.

    PARLEY=build/parley python3 tests/integration/test_nats_stall.py
"""
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import nats_cluster  # noqa: E402
import test_nats_nodes  # noqa: E402
from parley_client import Server, check, run, summary  # noqa: E402

PROMPT_S = 2.0     # what a loop that is not blocked answers within
REFUSE_S = 30.0    # an append's bound while the cluster does not answer
RECOVER_S = 90.0   # the node appends again after the cluster is back


def call(port, method, path, body=None, timeout=REFUSE_S + 30):
    """(status, decoded body, seconds)."""
    t0 = time.monotonic()
    st, b = test_nats_nodes.call(port, method, path, body, timeout)
    return st, b, time.monotonic() - t0


def msg(eid, say):
    return {"id": eid, "kind": "MessageEvent", "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": say}]}}


class Node:
    """What the test knows of its parley node: the events acknowledged."""

    def __init__(self, srv, cid):
        self.srv, self.port, self.cid = srv, srv.port, cid
        self.acked = []      # ids acknowledged (201), in order
        self.tried = set()   # every id offered, acknowledged or not
        self.n = 0

    def append(self, eid=None):
        eid = eid or "e%d" % self.n
        self.n += eid == "e%d" % self.n
        self.tried.add(eid)
        st, b, took = call(self.port, "POST",
                           "/api/conversations/%s/events/append" % self.cid, msg(eid, eid))
        if st == 201 and eid not in self.acked:
            self.acked.append(eid)
        return eid, st, b, took

    def log_ids(self):
        ids, page = [], None
        while True:
            q = "?limit=100" + ("&page_id=" + page if page else "")
            st, b, _ = call(self.port, "GET",
                            "/api/conversations/%s/events/search%s" % (self.cid, q))
            check(st == 200, "the events can be listed", st, b)
            ids += [e["id"] for e in b["items"]]
            page = b.get("next_page_id")
            if not page:
                return ids


def prompt(node, what):
    """GET /alive, /health and the conversation: each answered promptly."""
    for path in ("/alive", "/health", "/api/conversations/%s" % node.cid):
        st, b, took = call(node.port, "GET", path, timeout=PROMPT_S * 5)
        check(st == 200, "%s: GET %s answers 200" % (what, path), st, b)
        check(took < PROMPT_S, "%s: GET %s answers within %.0f s" % (what, path, PROMPT_S),
              "%.2f s" % took)


def refused(node, what):
    """An append while the cluster does not answer: 503 with one line
    naming the cluster, within REFUSE_S; nothing hangs."""
    eid, st, b, took = node.append()
    check(st == 503, "%s: an append is refused with 503" % what, st, b, "%.1f s" % took)
    check(took < REFUSE_S, "%s: refused within %.0f s" % (what, REFUSE_S), "%.1f s" % took)
    detail = b.get("detail", "") if isinstance(b, dict) else str(b)
    check("\n" not in detail and "nats://127.0.0.1:" in detail and "NATS" in detail,
          "%s: the reason is one line naming the cluster" % what, detail)
    return eid


def recovers(node, retry, what):
    """Once the cluster is back: the refused append, retried with the same
    id, succeeds (or is a duplicate, if it was stored after all), and new
    appends succeed, without restarting parley."""
    end = time.monotonic() + RECOVER_S
    last = None
    while True:
        _, st, b, _ = node.append(retry)
        if st == 201:
            break
        last = (st, b)
        check(st == 503, "%s: while recovering, an append gets 201 or 503" % what, st, b)
        check(time.monotonic() < end, "%s: appends work again within %.0f s" % (what, RECOVER_S),
              last)
        time.sleep(0.1)  # polling interval, not a synchronization
    for _ in range(3):
        eid, st, b, _ = node.append()
        check(st == 201, "%s: a new append after recovery" % what, st, b)
    check(node.srv.proc.poll() is None, "%s: parley kept running" % what)


def stream_records(cluster, node):
    """The conversation's records as the cluster holds them (a report)."""
    c = nats_cluster.Client(cluster.url(1))
    try:
        return "\n".join(c.records("parley.ev.*." + node.cid.replace("-", "")))
    except (OSError, RuntimeError) as e:
        return "cannot read the stream: %s" % e
    finally:
        c.close()


def intact(cluster, node, what):
    ids = node.log_ids()
    dup = len(ids) != len(set(ids))
    missing = [e for e in node.acked if e not in ids]
    if dup or missing:  # is it the cluster's log, or parley's reading of it?
        check(False, "%s: every acknowledged event is in the log once" % what,
              "missing %s" % missing, "listed %s" % ids,
              "the stream's records:\n" + stream_records(cluster, node))
    order = [e for e in ids if e in node.acked]
    check(order == node.acked, "%s: acknowledged events in the order acknowledged" % what,
          order, node.acked)


def stalled(cluster, node):
    pids = cluster.pids()
    # every server must be stopped, or the append below may be served
    check(len(pids) == cluster.nodes, "every nats-server is found to be stopped", pids)
    try:
        nats_cluster.pause(pids)
        prompt(node, "stalled")
        eid = refused(node, "stalled")
        prompt(node, "stalled, after a refused append")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    recovers(node, eid, "after SIGCONT")
    intact(cluster, node, "after SIGCONT")


def killed(cluster, node):
    cluster.kill_all()
    prompt(node, "killed")
    eid = refused(node, "killed")
    prompt(node, "killed, after a refused append")
    cluster.start_all()
    recovers(node, eid, "after a restart of the cluster")
    intact(cluster, node, "after a restart of the cluster")


def on_cluster(work, cluster):
    t0 = time.monotonic()
    srv = Server(data=os.path.join(work, "data")).start()
    try:
        st, b, _ = call(srv.port, "POST", "/api/conversations", {})
        check(st == 201, "a conversation", st, b)
        node = Node(srv, b["id"])
        for _ in range(5):
            _, st, b, _ = node.append()
            check(st == 201, "appends before any outage", st, b)
        run("stalled_cluster", stalled, cluster, node)
        run("killed_cluster", killed, cluster, node)
        run("no_loop_waits",
            lambda: check(srv.loop_requests() == 0, "parley_nats_loop_requests_total is 0",
                          srv.loop_requests()))
        run("server_stops_cleanly", srv.stop)
    finally:
        srv.cleanup()
    return summary(t0)


def main():
    return nats_cluster.main_on_cluster("parley-stall.", on_cluster)


if __name__ == "__main__":
    sys.exit(main())
