#!/usr/bin/env python3
"""test_nats_nodes.py - two parley nodes serving one JetStream cluster
(issue 22): every conversation has one writer, its owner node; the other
node forwards appends to it and answers with the owner's verdict; a
WebSocket subscriber on the node that does not own the conversation gets
every event once, in order; and two nodes that both take one conversation
over (a split: PARLEY_NATS_SPLIT=1, they never forward) never store two
appends at one index.

Starts its own 3-node cluster (nats_cluster.py, free ports) and parley
nodes on port 0; every process it starts is stopped by it. Nothing waits
with a sleep: every wait polls against a deadline.

    PARLEY=build/parley python3 tests/integration/test_nats_nodes.py
"""
import http.client
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import nats_cluster  # noqa: E402
from parley_client import Server, check, run, summary  # noqa: E402

DEADLINE_S = 60.0  # anything that should take a second or two


def call(port, method, path, body=None, timeout=90):
    """(status, decoded body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        try:
            b = json.loads(raw) if raw else None
        except ValueError:
            b = raw.decode("utf-8", "replace")
        return r.status, b
    finally:
        c.close()


def msg(eid):
    return {"id": eid, "kind": "MessageEvent", "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": eid}]}}


def append(port, cid, body):
    return call(port, "POST", "/api/conversations/%s/events/append" % cid, body)


def create(port):
    st, b = call(port, "POST", "/api/conversations", {})
    check(st == 201, "a conversation is created", st, b)
    return b["id"]


def known(port, cid):
    """Poll until the node knows the conversation (its catalog's watch)."""
    end = time.monotonic() + DEADLINE_S
    while True:
        st, b = call(port, "GET", "/api/conversations/%s" % cid)
        if st == 200:
            return
        check(time.monotonic() < end, "the other node knows the conversation", st, b)
        time.sleep(0.02)  # polling interval, not a synchronization


def log_events(port, cid):
    evs, page = [], None
    while True:
        q = "?limit=100" + ("&page_id=" + page if page else "")
        st, b = call(port, "GET", "/api/conversations/%s/events/search%s" % (cid, q))
        check(st == 200, "the events can be listed", st, b)
        evs += b["items"]
        page = b.get("next_page_id")
        if not page:
            return evs


def log_ids(port, cid):
    return [e["id"] for e in log_events(port, cid)]


def logged_status(evs):
    """The last execution_status the log records (None: none)."""
    st = None
    for e in evs:
        if e.get("kind") == "ConversationStateUpdateEvent" and e.get("key") == "execution_status":
            st = e.get("value")
    return st


def acked_index(b):
    return b["events"][0]["index"]


def retrying(port, cid, eid, end):
    """Append until an answer that is not 503 (the owner is being found or
    taken over); -> (status, body, 503s seen)."""
    busy = 0
    while True:
        st, b = append(port, cid, msg(eid))
        if st != 503:
            return st, b, busy
        busy += 1
        check(time.monotonic() < end, "an append is answered within the deadline", eid, b)
        time.sleep(0.02)  # polling interval, not a synchronization


def interleaved(a, b):
    """Appends through both nodes, one after the other: the first makes
    node a the owner; every later one through b is forwarded (b taking it
    over would fence a, whose next append would fail): all 201, dense."""
    cid = create(a.port)
    known(b.port, cid)
    base = None
    for i in range(30):
        node = (a, b)[i % 2]
        st, body = append(node.port, cid, msg("i%d" % i))
        check(st == 201, "append %d through node %d is committed" % (i, i % 2 + 1), st, body)
        if base is None:
            base = acked_index(body)
        check(acked_index(body) == base + i, "append %d at the next dense index" % i,
              acked_index(body), base + i)
        check(not body.get("duplicate"), "append %d is not a duplicate" % i, body)
    # the same ids again, through either node: duplicates at their index
    for i in (0, 1, 7, 29):
        for node in (a, b):
            st, body = append(node.port, cid, msg("i%d" % i))
            check(st == 201 and body.get("duplicate") is True,
                  "a retry of i%d through node %s is a duplicate" % (i, node.name), st, body)
            check(acked_index(body) == base + i, "the duplicate names the first index",
                  body, base + i)
    # verdicts other than a commit are the owner's, whichever node is asked
    bad = [{"id": "bad1", "kind": "NoSuchKind"}, "not an event", []]
    for req in bad:
        sa, ba = append(a.port, cid, req)
        sb, bb = append(b.port, cid, req)
        check(sa == sb and ba == bb, "the same verdict from both nodes", req, sa, ba, sb, bb)
        check(400 <= sa < 500, "an invalid append is refused", req, sa, ba)
    for node in (a, b):
        ids = log_ids(node.port, cid)
        got = ids[base:base + 30]
        check(got == ["i%d" % i for i in range(30)] and len(ids) == base + 30,
              "node %s reads every event once, at its index" % node.name, ids)
    # a user message (and a run) through the node that does not own it is
    # forwarded too: the owner's next append is not fenced
    for and_run in (False, True):
        st, body = call(b.port, "POST", "/api/conversations/%s/events" % cid,
                        {"role": "user", "content": [{"type": "text", "text": "hi"}],
                         "run": and_run})
        check(st == 200 and body == {"success": True}, "a user message through node 2", st, body)
        st, body = append(a.port, cid, msg("after-message-%s" % and_run))
        check(st == 201, "the owner appends after a message posted elsewhere (not fenced)",
              st, body)


def action(eid, call_id):
    return {"id": eid, "source": "agent", "thought": [], "thinking_blocks": [],
            "action": {"command": "ls", "is_input": False, "reset": False,
                       "kind": "TerminalAction"},
            "tool_name": "terminal", "tool_call_id": call_id,
            "tool_call": {"id": call_id, "name": "terminal",
                          "arguments": json.dumps({"command": "ls"}), "origin": "completion"},
            "llm_response_id": "r-" + eid, "security_risk": "UNKNOWN", "kind": "ActionEvent"}


def seen_on_both(nodes, cid, what, pred):
    """Poll each node until pred(status, info, events) holds: the write's
    effect is what both nodes answer."""
    for node in nodes:
        end = time.monotonic() + DEADLINE_S
        while True:
            st, info = call(node.port, "GET", "/api/conversations/%s" % cid)
            evs = log_events(node.port, cid) if st == 200 else []
            if pred(st, info, evs):
                break
            check(time.monotonic() < end, "%s is seen on node %s" % (what, node.name), st, info,
                  [(e.get("kind"), e.get("key"), e.get("value")) for e in evs[-4:]])
            time.sleep(0.02)  # polling interval, not a synchronization


def writes_forwarded(a, b):
    """Every write of a conversation issued on the node that does not own
    it (b) is forwarded to its owner (a): the owner's next append is
    committed at once (ownership did not move: b taking the log over would
    fence a, whose append would get 503), and the write's effect is what
    both nodes answer (info and log)."""
    cid = create(a.port)
    known(b.port, cid)
    p = "/api/conversations/%s" % cid
    nodes = (a, b)
    mine = []

    def owner_appends(what, event=None):
        event = event or msg("wf%d" % len(mine))
        mine.append(event["id"])
        st, body = append(a.port, cid, event)
        check(st == 201 and not body.get("duplicate"),
              "the owner's append after %s on the other node is committed (not fenced)" % what,
              st, body)

    def on_b(method, route, body, what, status=200):
        st, got = call(b.port, method, p + route, body)
        check(st == status, "%s through the node that does not own it" % what, st, got)
        return got

    owner_appends("nothing")
    # controls: each is in the log (a status, a pause, an interrupt)
    on_b("POST", "/run", None, "run")
    owner_appends("run")
    seen_on_both(nodes, cid, "the run", lambda st, i, evs: logged_status(evs) == "running" and
                 i.get("execution_status") == "running")
    on_b("POST", "/pause", None, "pause")
    owner_appends("pause")
    seen_on_both(nodes, cid, "the pause", lambda st, i, evs: logged_status(evs) == "paused" and
                 i.get("execution_status") == "paused" and
                 any(e["kind"] == "PauseEvent" for e in evs))
    on_b("POST", "/run", None, "run again")
    on_b("POST", "/interrupt", None, "interrupt")
    owner_appends("interrupt")
    seen_on_both(nodes, cid, "the interrupt",
                 lambda st, i, evs: any(e["kind"] == "InterruptEvent" for e in evs))
    # confirmation: a pending call rejected, then an accept (a run)
    owner_appends("nothing", action("act1", "call-1"))
    on_b("POST", "/events/respond_to_confirmation", {"accept": False, "reason": "not that"},
         "a rejection")
    owner_appends("a rejection")
    seen_on_both(nodes, cid, "the rejection", lambda st, i, evs: any(
        e["kind"] == "UserRejectObservation" and e.get("tool_call_id") == "call-1" and
        e.get("rejection_reason") == "not that" for e in evs))
    on_b("POST", "/events/respond_to_confirmation", {"accept": True}, "an accept")
    owner_appends("an accept")
    # the agent routes that change the conversation
    pol = {"kind": "AlwaysConfirm"}
    on_b("POST", "/confirmation_policy", {"policy": pol}, "a confirmation policy")
    owner_appends("a confirmation policy")
    seen_on_both(nodes, cid, "the policy", lambda st, i, evs: i.get("confirmation_policy") == pol
                 and any(e.get("key") == "confirmation_policy" and e.get("value") == pol
                         for e in evs))
    ana = {"kind": "LLMSecurityAnalyzer"}
    on_b("POST", "/security_analyzer", {"security_analyzer": ana}, "a security analyzer")
    owner_appends("a security analyzer")
    seen_on_both(nodes, cid, "the analyzer", lambda st, i, evs: i.get("security_analyzer") == ana)
    # secrets stay in the owner's memory (its hosted agent's): nothing to see
    on_b("POST", "/secrets", {"secrets": {"TOKEN": "s3cret"}}, "secrets")
    owner_appends("secrets")
    # meta
    on_b("PATCH", "", {"title": "forwarded title", "tags": {"k": "v"}}, "a PATCH")
    owner_appends("a PATCH")
    seen_on_both(nodes, cid, "the PATCH", lambda st, i, evs: i.get("title") == "forwarded title"
                 and i.get("tags") == {"k": "v"})
    ids = log_ids(a.port, cid)
    check([i for i in ids if i in mine] == mine, "the owner's appends are in the log, in order",
          ids, mine)
    check(ids == log_ids(b.port, cid), "both nodes read one log")
    # deletion, last: gone from both nodes
    on_b("DELETE", "", None, "a DELETE")
    seen_on_both(nodes, cid, "the deletion", lambda st, i, evs: st == 404)
    st, body = append(a.port, cid, msg("after-delete"))
    check(st == 404, "the owner's append after the deletion: no such conversation", st, body)


def ws_message_forwarded(a, b):
    """User messages sent on a WebSocket of the node that does not own the
    conversation (b) are posted by its owner (a), as POST .../events with
    its run would be: in the log once each, in the order sent (three sent
    at once), the run with them, ownership not moved (the owner's next
    append is committed, not fenced), and the socket sees them come back
    from the log."""
    import ws_raw
    cid = create(a.port)
    known(b.port, cid)
    sock, rest = ws_raw.handshake(b.port, "/sockets/events/%s" % cid)
    reader = ws_raw.Reader(sock, rest)
    texts = ["from b's socket %d" % i for i in range(3)]

    def texts_of(evs):
        return [t for e in evs if e.get("kind") == "MessageEvent"
                for t in texts if t in json.dumps(e.get("llm_message"))]

    try:
        for t in texts:
            sock.sendall(ws_raw.frame(0x1, json.dumps(
                {"role": "user", "content": [{"type": "text", "text": t}]}).encode()))
        end = time.monotonic() + DEADLINE_S
        seen = []
        while len(seen) < len(texts):
            check(time.monotonic() < end, "the socket sees its messages come back in time", seen)
            f = reader.next()
            check(f is not None, "the WebSocket stays open")
            if f[0] != 0x1:
                continue
            e = json.loads(f[1])
            check(not (isinstance(e, dict) and e.get("kind") == "ServerErrorEvent"),
                  "no error for the messages", e)
            if isinstance(e, dict):
                seen += texts_of([e])
        check(seen == texts, "the socket sees them once each, in the order sent", seen)
    finally:
        sock.close()
    st, body = append(a.port, cid, msg("after-ws"))
    check(st == 201 and not body.get("duplicate"),
          "the owner's append after the socket's messages is committed (not fenced)", st, body)
    seen_on_both((a, b), cid, "the socket's messages, in order, and the run",
                 lambda st, i, evs: texts_of(evs) == texts and
                 i.get("execution_status") == "running")


def info(port, cid):
    st, b = call(port, "GET", "/api/conversations/%s" % cid)
    check(st == 200, "the conversation's info", st, b)
    return b


def reads_fresh(a, b):
    """What the node that does not write a conversation (b) answers of it
    is the log's as of the request, not what it loaded: right after each
    write through the owner (a), with no wait, b's info has the owner's
    count, status, findings and time of the last event, alone or in a
    batch, whether b's actor was running or not, and b's WebSocket
    subscribers still get every event once."""
    import ws_raw
    cid = create(a.port)
    known(b.port, cid)
    base = info(b.port, cid)  # b loads the conversation now: its state is this one's
    check(base["event_count"] == info(a.port, cid)["event_count"], "the same count at first",
          base)
    keys = ("event_count", "execution_status", "violations", "updated_at")

    def late():
        """How often b logged a read at the leader that took over 1 s
        (conv_refresh.c: then it answers from memory, and catches up)."""
        return b.log_tail(0).count("reading what other nodes appended takes over")

    def same(what):
        before = late()
        ia, ib = info(a.port, cid), info(b.port, cid)
        if not all(ia[k] == ib[k] for k in keys) and late() > before:
            # a loaded machine: b's read was late, said so, and catches up
            end = time.monotonic() + DEADLINE_S
            while not all(ia[k] == ib[k] for k in keys) and time.monotonic() < end:
                time.sleep(0.05)  # polling interval, not a synchronization
                ib = info(b.port, cid)
        check(all(ia[k] == ib[k] for k in keys),
              "after %s through the owner, the other node says what the owner says" % what,
              {k: ia[k] for k in keys}, {k: ib[k] for k in keys})
        st, many = call(b.port, "GET", "/api/conversations?ids=%s" % cid)
        check(st == 200 and many[0]["event_count"] == ia["event_count"] and
              many[0]["execution_status"] == ia["execution_status"],
              "a batch on the other node too", st, many)
        return ib

    for i in range(5):
        st, body = append(a.port, cid, msg("f%d" % i))
        check(st == 201, "append f%d through the owner" % i, st, body)
        got = same("append f%d" % i)
        check(got["event_count"] == base["event_count"] + i + 1, "one more event each time", got)
    for route, status in (("run", "running"), ("pause", "paused")):
        st, body = call(a.port, "POST", "/api/conversations/%s/%s" % (cid, route))
        check(st == 200, route, st, body)
        check(same(route)["execution_status"] == status, "the status on the other node", status)
    # a subscriber on b, then more appends through a: b's reads take in the
    # events its subscriber is given too, and none is sent twice
    sock, rest = ws_raw.handshake(b.port, "/sockets/events/%s?resend_mode=all" % cid)
    reader = ws_raw.Reader(sock, rest)
    got = []
    try:
        for i in range(5, 15):
            st, body = append(a.port, cid, msg("f%d" % i))
            check(st == 201, "append f%d" % i, st, body)
            same("append f%d with a subscriber on the other node" % i)
        ids = log_ids(a.port, cid)
        end = time.monotonic() + DEADLINE_S
        while len(got) < len(ids):
            check(time.monotonic() < end, "the subscriber gets every event", len(got), len(ids))
            f = reader.next()
            check(f is not None, "the WebSocket stays open", got)
            if f[0] == 0x1:
                e = json.loads(f[1])
                # the stream's own state frame (full_state) is not an event of the log
                if isinstance(e, dict) and "id" in e and e.get("key") != "full_state":
                    got.append(e["id"])
        check(got == ids, "the subscriber on the other node saw every event once, in order",
              got, ids)
    finally:
        sock.close()


def lists_fresh(a, b):
    """Searches and counts on the node that does not write a conversation
    (b) show what its owner (a) says within about a second: the owner
    publishes its summary (status, count, findings, last event) into the
    catalog and b's watch takes it in; nothing on b reads the log. b
    loaded the conversation first, so what it knows of it is old."""
    cid = create(a.port)
    known(b.port, cid)
    info(b.port, cid)  # b's actor loads it: its lists know this state
    for i in range(3):
        st, body = append(a.port, cid, msg("l%d" % i))
        check(st == 201, "append l%d through the owner" % i, st, body)
    for route in ("run", "pause"):
        st, body = call(a.port, "POST", "/api/conversations/%s/%s" % (cid, route))
        check(st == 200, route, st, body)
    st, body = append(a.port, cid, msg("l3"))
    check(st == 201, "append l3 through the owner", st, body)
    written = time.monotonic()
    want = info(a.port, cid)
    keys = ("event_count", "execution_status", "violations", "updated_at")

    def counts(port):
        got = []
        for q in ("", "?status=paused", "?status=idle"):
            st, n = call(port, "GET", "/api/conversations/count" + q)
            check(st == 200, "a count" + q, st, n)
            got.append(n)
        return got

    def shown(port, q):
        st, page = call(port, "GET", "/api/conversations/search?limit=100" + q)
        check(st == 200, "a search" + q, st, page)
        return next((c for c in page["items"] if c["id"] == cid), None)

    end = written + 5.0
    while True:
        item, paused = shown(b.port, ""), shown(b.port, "&status=paused")
        na, nb = counts(a.port), counts(b.port)
        if (item is not None and all(item[k] == want[k] for k in keys) and
                paused is not None and na == nb):
            break
        check(time.monotonic() < end, "b's search and counts show the owner's state within "
              "a few seconds", {k: want[k] for k in keys},
              item and {k: item[k] for k in keys}, paused is not None, na, nb)
        time.sleep(0.05)  # polling interval, not a synchronization
    print("lists on the other node: the owner's state after %.2f s"
          % (time.monotonic() - written))


def ws_events(port, cid):
    """A WebSocket subscriber of the whole log: a function that reads until
    it has n events, returning their ids."""
    import ws_raw
    sock, rest = ws_raw.handshake(port, "/sockets/events/%s?resend_mode=all" % cid)
    reader = ws_raw.Reader(sock, rest)
    got = []

    def until(n):
        end = time.monotonic() + DEADLINE_S
        while len(got) < n:
            check(time.monotonic() < end, "the subscriber gets %d events in time" % n, got)
            f = reader.next()
            check(f is not None, "the WebSocket stays open", got)
            e = json.loads(f[1]) if f[0] == 0x1 else None
            # the stream's own state frame is not an event of the log
            if isinstance(e, dict) and "id" in e and \
                    e.get("kind") != "ConversationStateUpdateEvent":
                got.append(e["id"])
        return got
    return sock, until


def ws_elsewhere(a, b):
    """A WebSocket on the node that does not own the conversation (b) gets
    every committed event once, in order: those before it connected
    (replayed) and those appended through either node afterwards (the
    owner's records, republished by the stream)."""
    cid = create(a.port)
    known(b.port, cid)
    for i in range(5):
        st, body = append(a.port, cid, msg("w%d" % i))
        check(st == 201, "an append before the subscriber", st, body)
    sock, read_until = ws_events(b.port, cid)
    try:
        got = read_until(5)
        for i in range(5, 45):
            st, body = append((a, b)[i % 2].port, cid, msg("w%d" % i))
            check(st == 201, "append w%d" % i, st, body)
        ids = log_ids(a.port, cid)
        read_until(len(ids))
        check(got == ids, "the subscriber on the other node saw every event once, in order",
              got, ids)
        # nothing more comes (no event twice): one more append is the next frame
        st, body = append(b.port, cid, msg("w-last"))
        check(st == 201, "one more append", st, body)
        read_until(len(ids) + 1)
        check(got[-1] == "w-last" and len(got) == len(set(got)), "then the next one, once", got)
    finally:
        sock.close()
    # the hand-off: a subscriber that connects while both nodes append
    sent, errors = [], []

    def producer():
        try:
            for i in range(60):
                st, body = append((a, b)[i % 2].port, cid, msg("h%d" % i))
                check(st == 201, "append h%d" % i, st, body)
                sent.append(i)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    t = threading.Thread(target=producer)
    t.start()
    end = time.monotonic() + DEADLINE_S
    while len(sent) < 20 and t.is_alive():
        check(time.monotonic() < end, "the producer gets going", len(sent))
        time.sleep(0.01)  # polling interval, not a synchronization
    sock, read_until = ws_events(b.port, cid)
    try:
        t.join()
        check(not errors, "the producer finished", errors[:1])
        ids = log_ids(a.port, cid)
        got = read_until(len(ids))
        check(got == ids, "a subscriber that came mid-stream saw every event once, in order",
              got, ids)
    finally:
        sock.close()


def concurrent(a, b):
    """Both nodes append to three conversations at once (producers retry
    a 503): every acknowledged id once in the log, at its acked index."""
    cids = [create((a, b)[k % 2].port) for k in range(3)]
    for cid in cids:
        known(a.port, cid)
        known(b.port, cid)
    acks = {cid: {} for cid in cids}
    errors = []
    lock = threading.Lock()
    end = time.monotonic() + DEADLINE_S * 3

    def producer(node, tag):
        try:
            for i in range(20):
                for cid in cids:
                    eid = "%s-%d" % (tag, i)
                    st, body, _ = retrying(node.port, cid, eid, end)
                    check(st == 201, "a concurrent append is committed", eid, st, body)
                    with lock:
                        acks[cid][eid] = acked_index(body)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    ts = [threading.Thread(target=producer, args=(n, "%s%d" % (n.name, k)))
          for n in (a, b) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "every producer finished", errors[:1])
    for cid in cids:
        idx = sorted(acks[cid].values())
        check(len(idx) == len(set(idx)) == 80, "80 acks at 80 distinct indexes", cid, len(idx))
        for node in (a, b):
            ids = log_ids(node.port, cid)
            check(len(ids) == len(set(ids)), "no event stored twice", cid)
            for eid, at in acks[cid].items():
                check(at < len(ids) and ids[at] == eid, "an acked event is at its acked index",
                      cid, eid, at)


def owner_gone(work):
    """The owner is killed (SIGKILL): while its lease lasts, an append
    through the other node is refused with 503 and one line naming the
    owner; once the lease is over, that node takes the conversation over
    and the retried append is committed at the next index; a retry of an
    event the dead owner had committed is answered as a duplicate."""
    c = Server(data=os.path.join(work, "c"), args=["--node-id", "c1"]).start()
    d = Server(data=os.path.join(work, "d"), args=["--node-id", "d1"]).start()
    try:
        cid = create(c.port)
        known(d.port, cid)
        for i in range(3):
            st, body = append(d.port, cid, msg("o%d" % i))  # forwarded to c
            check(st == 201 and acked_index(body) == i, "append o%d" % i, st, body)
        c.kill()
        end = time.monotonic() + DEADLINE_S
        refused = []
        while True:
            st, body = append(d.port, cid, msg("o3"))
            if st != 503:
                break
            why = body.get("detail", "") if isinstance(body, dict) else str(body)
            check("\n" not in why and why, "a refusal says why in one line", why)
            refused.append(why)
            check(time.monotonic() < end, "the other node takes over once the lease is over",
                  refused[-1])
            time.sleep(0.05)  # polling interval, not a synchronization
        check(st == 201 and acked_index(body) == 3, "the append after the take-over", st, body)
        # while the lease lasts: the owner named; then (the node's memory of
        # the log was older than the take-over) one "restarting: retry"
        check(refused and "owner node c1" in refused[0],
              "a refusal while the owner's lease lasts names the owner", refused[:1])
        print("owner gone: %d refusals, first %r, last %r" % (len(refused), refused[0],
                                                               refused[-1]))
        st, body = append(d.port, cid, msg("o1"))
        check(st == 201 and body.get("duplicate") is True and acked_index(body) == 1,
              "a retry of an event the dead owner committed is a duplicate", st, body)
        check(log_ids(d.port, cid) == ["o0", "o1", "o2", "o3"], "the log after the take-over")
        d.stop()
    finally:
        c.cleanup()
        d.cleanup()


def failover_keeps_the_gate(work):
    """The owner dies with a tool call pending, a message deferred behind it
    and the conversation paused: the node that takes it over rebuilds all
    of that from the cluster. An answer out of turn is still refused
    (naming the call), the status is still paused, and once the call's
    observation is appended there, the deferred message commits after it."""
    from api_test import action, agent_msg, observation, user_msg
    c = Server(data=os.path.join(work, "fc"), args=["--node-id", "fc1"]).start()
    d = Server(data=os.path.join(work, "fd"), args=["--node-id", "fd1"]).start()
    try:
        cid = create(c.port)
        known(d.port, cid)
        st, b = append(d.port, cid, [user_msg("u1"), action("a1", "c1", "r1")])
        check(st == 201, "a call, forwarded to the owner", st, b)
        st, b = append(d.port, cid, user_msg("u2", say="deferred across the failover"))
        check(st == 202, "a message deferred behind it", st, b)
        st, b = call(d.port, "POST", "/api/conversations/%s/pause" % cid)
        check(st == 200, "paused", st, b)
        c.kill()
        end = time.monotonic() + DEADLINE_S
        while True:  # 503 while the dead owner's lease lasts, then a take-over
            st, b = append(d.port, cid, agent_msg("m9", "too soon", "r2"))
            if st != 503:
                break
            check(time.monotonic() < end, "the other node takes over once the lease is over", b)
            time.sleep(0.05)  # polling interval, not a synchronization
        check(st == 409 and "c1" in json.dumps(b),
              "an answer out of turn is refused after the failover, naming the call", st, b)
        st, info = call(d.port, "GET", "/api/conversations/%s" % cid)
        check(st == 200 and info["execution_status"] == "paused", "still paused", st, info)
        st, b = append(d.port, cid, observation("t1", "c1"))
        check(st == 201, "the call's observation, on the node that took over", st, b)
        end = time.monotonic() + DEADLINE_S
        while "u2" not in log_ids(d.port, cid):
            check(time.monotonic() < end, "the deferred message commits after the observation",
                  log_ids(d.port, cid))
            time.sleep(0.02)  # polling interval, not a synchronization
        evs = log_events(d.port, cid)
        mine = [e["id"] for e in evs if e["id"] in ("u1", "a1", "t1", "u2", "m9")]
        check(mine == ["u1", "a1", "t1", "u2"], "the deferred message after the observation, each once",
              [(e["id"], e["kind"], e.get("key"), e.get("value")) for e in evs])
        d.stop()
    finally:
        c.cleanup()
        d.cleanup()


def split(work):
    """Two nodes that both take one conversation over (neither forwards):
    they fence each other; never two events at one index."""
    nodes = [Server(data=os.path.join(work, "split%d" % k),
                    args=["--node-id", "s%d" % k],
                    env={"PARLEY_NATS_SPLIT": "1"}).start() for k in (1, 2)]
    try:
        for k, n in enumerate(nodes):
            n.name = "s%d" % (k + 1)
        cid = create(nodes[0].port)
        known(nodes[1].port, cid)
        acks, fenced, errors = {}, [0], []
        lock = threading.Lock()
        end = time.monotonic() + DEADLINE_S * 3

        def producer(node):
            try:
                for i in range(25):
                    eid = "%s-%d" % (node.name, i)
                    st, body, busy = retrying(node.port, cid, eid, end)
                    check(st == 201, "an append is committed in the end", eid, st, body)
                    with lock:
                        fenced[0] += busy
                        at = acked_index(body)
                        check(at not in acks.values() or acks.get(eid) == at,
                              "no two acks at one index", eid, at, acks)
                        acks[eid] = at
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)

        ts = [threading.Thread(target=producer, args=(n,)) for n in nodes]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errors, "both producers finished", errors[:1])
        check(len(set(acks.values())) == len(acks) == 50, "50 acks at 50 indexes", len(acks))
        # read by a node that never wrote it (a node fenced without knowing
        # it yet answers from its memory until its next append)
        reader = Server(data=os.path.join(work, "reader"), args=["--node-id", "r1"]).start()
        nodes.append(reader)
        known(reader.port, cid)
        for n in [reader]:
            ids = log_ids(n.port, cid)
            check(len(ids) == len(set(ids)), "no event stored twice", ids)
            for eid, at in acks.items():
                check(at < len(ids) and ids[at] == eid, "every acked event at its acked index",
                      eid, at)
        # a node that writes, and has a subscriber, learns from the log's
        # records that the other one took it over: it no longer answers
        # from its memory, and its subscriber gets the other's events
        st, body, _ = retrying(nodes[0].port, cid, "s1-last", end)
        check(st == 201 and acked_index(body) == 50, "s1 writes once more", st, body)
        sock, until = ws_events(nodes[0].port, cid)
        try:
            until(51)
            st, body, _ = retrying(nodes[1].port, cid, "s2-last", end)
            check(st == 201 and acked_index(body) == 51, "s2 takes over again", st, body)
            ids = log_ids(reader.port, cid)
            check(until(52) == ids, "s1's subscriber gets s2's event", ids[-2:])
            check(log_ids(nodes[0].port, cid) == ids, "s1 reads the log, not its memory")
        finally:
            sock.close()
        # a node fenced while its requests wait checks them from memory or
        # in the thread pool, never against the cluster on its loop
        waits = [n.loop_requests() for n in nodes[:2]]
        print("split: %d appends refused while the nodes fenced each other; "
              "loop waits %s" % (fenced[0], waits))
        check(waits == [0, 0], "parley_nats_loop_requests_total is 0 on both split nodes",
              waits)
        reader.stop()
        for n in nodes[:2]:
            n.terminate()
            rc = n.proc.wait(60)
            check(rc == 0, "a split node exits 0 after SIGTERM", rc, n.log_tail())
            n.kill()
    finally:
        for n in nodes:
            n.cleanup()


def on_cluster(work, cluster):
    t0 = time.monotonic()
    a = Server(data=os.path.join(work, "a"), args=["--node-id", "p1"]).start()
    b = Server(data=os.path.join(work, "b"), args=["--node-id", "p2"]).start()
    a.name, b.name = "p1", "p2"
    try:
        run("interleaved_appends_forwarded", interleaved, a, b)
        run("writes_forwarded_to_the_owner", writes_forwarded, a, b)
        run("reads_on_the_other_node_are_the_logs", reads_fresh, a, b)
        run("lists_on_the_other_node_follow_the_owner", lists_fresh, a, b)
        run("ws_subscriber_on_the_other_node", ws_elsewhere, a, b)
        run("ws_message_forwarded_to_the_owner", ws_message_forwarded, a, b)
        run("concurrent_appends", concurrent, a, b)
        run("owner_gone", owner_gone, work)
        run("failover_keeps_the_gate", failover_keeps_the_gate, work)
        run("split_two_writers", split, work)
        run("no_loop_waits",
            lambda: check(a.loop_requests() == 0 and b.loop_requests() == 0,
                          "parley_nats_loop_requests_total is 0",
                          a.loop_requests(), b.loop_requests()))
        run("nodes_stop_cleanly", lambda: (a.stop(), b.stop()))
    finally:
        a.cleanup()
        b.cleanup()
    return summary(t0)


def main():
    return nats_cluster.main_on_cluster("parley-nodes.", on_cluster)


if __name__ == "__main__":
    sys.exit(main())
