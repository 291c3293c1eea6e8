#!/usr/bin/env python3
"""test_nats_chaos.py - three parley nodes on one JetStream cluster under
load while the owner of the busy conversations is SIGKILLed again and
again (and started again each time) and one NATS server is restarted
(issue 22).

Two busy conversations, created on node n1 (their first owner). Round r's
victim is the owner of conversation r % 2, so that both conversations are
taken over after a kill, each in two of the three rounds (the first round
kills n1, the owner of both). The other two nodes are the fronts:
`parley load --faults --conversation C` runs against one front per
conversation (producers that drop their connection every 20 to 200
answers, WebSocket subscribers that cut theirs every 100 to 1,000 frames
and resume with after_id), the test's own subscribers follow both
conversations on both fronts, and a probe per conversation appends to it
through its front, retrying a 503 with the same id. Then the victim is
SIGKILLed: the fronts' forwards of the conversations it owned are refused
(503) while its lease lasts, then each front takes its conversation over,
the probes' appends go through again (failover time: the kill to the
first append acknowledged through the other node, from a request sent
after the kill), and the victim is started again (a new process: it owns
nothing). In the second round one NATS server is also restarted under
the load.

The verdict, per round and at the end:
  - each `parley load` says pass: every subscriber got every acked event
    once, in order (across its own cuts), the log holds the acked events
    at their acked indexes (a 503 is an unknown outcome: the count of the
    load's events may exceed the acks then, never the reverse);
  - the test's subscribers, on nodes that stayed up, saw the whole log
    once, in order, across the failover;
  - every probe append acknowledged is in the log once, at its acked index;
  - each conversation's log holds a take-over for each kill of its owner;
  - the log read through every node is the same, each id once;
  - the records themselves, read from the streams: one record per slot,
    dense indexes, and every record of events written by the writer of the
    latest take-over before it: no event was appended by a fenced node.

Bounded to a couple of minutes; starts its own cluster on free ports and
parley nodes on port 0; every process it starts is stopped. No sleep is a
synchronization: waits poll against deadlines.

    PARLEY=build/parley python3 tests/integration/test_nats_chaos.py
"""
import base64
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import nats_cluster  # noqa: E402
from parley_client import Server, check, run, summary  # noqa: E402
from test_nats_nodes import call, log_ids  # noqa: E402

ROUNDS = 3
LOAD_S = 8          # each round's load
KILL_AT_S = 2.5     # into the round
DEADLINE_S = 90.0   # anything bounded by a lease, a take-over and a restart
PROBE_EVERY_S = 0.02  # the probe's pace: the failover time's resolution



def msg(eid):
    return {"id": eid, "kind": "MessageEvent", "source": "agent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": eid}]}}


# ---- the records, read from the streams (the NATS protocol, enough of it) ----

class Nats(nats_cluster.Client):
    """A NATS connection for JetStream API requests, and the records of a
    conversation's log."""

    def records(self, hexid):
        """The conversation's records in stream order: [(seq, headers)], with
        headers {name: [values]}."""
        for shard in range(64):
            subject = "parley.ev.%d.%s" % (shard, hexid)
            out, seq = [], 1
            while True:
                r = self.request("$JS.API.STREAM.MSG.GET.PARLEY_EV_%d" % shard,
                                 {"seq": seq, "next_by_subj": subject})
                if "error" in r:
                    break
                m = r["message"]
                out.append((m["seq"], parse_headers(base64.b64decode(m.get("hdrs", "")))))
                seq = m["seq"] + 1
            if out:
                return out
        return []


def parse_headers(raw):
    h = {}
    for line in raw.decode("utf-8", "replace").split("\r\n")[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            h.setdefault(k.strip(), []).append(v.strip())
    return h


def check_chain(records, ids, cid):
    """One record per slot, dense indexes, and every record of events by
    the writer of the latest take-over before it."""
    epoch, writer, count, got, takeovers = 0, None, 0, [], 0
    for k, (seq, h) in enumerate(records):
        one = {n: v[0] for n, v in h.items()}
        check(int(one["Parley-Slot"]) == k, "records at consecutive slots (one per slot)",
              cid, seq, one)
        check(int(one["Parley-Index"]) == count, "each record at the next dense index",
              cid, seq, one, count)
        e, w = int(one["Parley-Epoch"]), one["Parley-Writer"]
        if one.get("Parley-Kind") == "take-over":
            check(e > epoch, "a take-over starts a later term", cid, seq, e, epoch)
            epoch, writer = e, w
            takeovers += 1
            continue
        check(e == epoch and w == writer,
              "events written by the latest take-over's writer, never by a fenced one",
              cid, seq, one, epoch, writer)
        n = int(one["Parley-Count"])
        check(len(h.get("Parley-Id", [])) == n, "a record names each of its events", cid, seq)
        got += h["Parley-Id"]
        count += n
    check(got == ids, "the records hold the log's events, in order", cid, len(got), len(ids))
    return takeovers


# ---- the test's own clients -------------------------------------------------

class Subscriber(threading.Thread):
    """Follows a conversation from its first event on one node (resend_mode
    all) until told how many events the log holds."""

    def __init__(self, port, cid):
        super().__init__(daemon=True)
        import ws_raw
        self.sock, rest = ws_raw.handshake(port, "/sockets/events/%s?resend_mode=all" % cid)
        self.sock.settimeout(DEADLINE_S)
        self.reader = ws_raw.Reader(self.sock, rest)
        self.got, self.error, self.closed = [], None, False
        self.start()

    def run(self):
        import ws_raw
        try:
            while True:
                f = self.reader.next()
                if f is None:
                    if not self.closed:
                        self.error = "the WebSocket closed after %d events" % len(self.got)
                    return
                if f[0] == 0x9:  # a ping: the server closes a socket that does not answer
                    self.sock.sendall(ws_raw.frame(0xA, f[1]))
                elif f[0] == 0x1:
                    e = json.loads(f[1])
                    if isinstance(e, dict) and "id" in e and e.get("key") != "full_state":
                        self.got.append(e["id"])
        except Exception as e:  # noqa: BLE001 - reported by the round
            if not self.closed:
                self.error = repr(e)

    def finish(self, n):
        """Wait until it has n events (or fails, or the deadline passes),
        then close it."""
        end = time.monotonic() + DEADLINE_S
        while len(self.got) < n and self.error is None and time.monotonic() < end:
            time.sleep(0.02)  # polling interval, not a synchronization
        self.close()
        self.join(DEADLINE_S)
        return len(self.got) >= n

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader's recv
        except OSError:
            pass
        self.sock.close()


class Probe(threading.Thread):
    """Appends through one node, one event at a time, retrying a 503 with
    the same id; records each ack, and the first one sent after `killed`."""

    def __init__(self, port, cid, tag):
        super().__init__(daemon=True)
        self.port, self.cid, self.tag = port, cid, tag
        self.acks, self.stop, self.error = {}, False, None
        self.killed, self.recovered, self.refusals = None, None, 0
        self.start()

    def run(self):
        i = 0
        try:
            while not self.stop:
                eid = "%s-%d" % (self.tag, i)
                while not self.stop:
                    sent = time.monotonic()
                    st, b = call(self.port, "POST",
                                 "/api/conversations/%s/events/append" % self.cid, msg(eid))
                    if st == 201:
                        self.acks[eid] = b["events"][0]["index"]
                        if self.killed is not None and self.recovered is None and \
                                sent >= self.killed:
                            self.recovered = time.monotonic()
                        break
                    check(st == 503, "a probe append is committed or refused 503", st, b)
                    self.refusals += 1
                    time.sleep(PROBE_EVERY_S)  # pace of retries, not a synchronization
                i += 1
                time.sleep(PROBE_EVERY_S)  # the probe's pace, not a synchronization
        except Exception as e:  # noqa: BLE001 - reported by the round
            self.error = repr(e)


def load(parley, port, cid, tag, work):
    out = open(os.path.join(work, "load-%s.json" % tag), "w+")
    err = open(os.path.join(work, "load-%s.err" % tag), "w+")
    p = subprocess.Popen([parley, "load", "http://127.0.0.1:%d" % port, "--conversation", cid,
                          "--producers", "1", "--subscribers", "3", "--faults",
                          "--duration", "%ds" % LOAD_S, "--json"],
                         stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    return p, out, err


def on_cluster(work, cluster):
    nodes, loads = {}, []
    try:
        parley = os.environ["PARLEY"]
        t0 = time.monotonic()

        def start(name):
            nodes[name] = Server(data=os.path.join(work, name),
                                 args=["--node-id", name]).start()

        for name in ("n1", "n2", "n3"):
            start(name)
        convs = []
        for k in range(2):
            st, b = call(nodes["n1"].port, "POST", "/api/conversations", {})
            check(st == 201, "a busy conversation is created on n1", st, b)
            convs.append(b["id"])
        owner = {c: "n1" for c in convs}
        taken = {c: 0 for c in convs}  # take-overs after a kill of its owner
        probes, failovers, report = [], [], []

        def a_round(r):
            target = convs[r % 2]  # the victims alternate between the owners
            victim = owner[target]
            fronts = [n for n in ("n1", "n2", "n3") if n != victim]
            front = {target: fronts[0], convs[1 - r % 2]: fronts[1]}
            for c in convs:  # both fronts know both conversations
                for n in fronts:
                    end = time.monotonic() + DEADLINE_S
                    while call(nodes[n].port, "GET", "/api/conversations/%s" % c)[0] != 200:
                        check(time.monotonic() < end, "a front knows the conversation", n, c)
                        time.sleep(0.02)  # polling interval, not a synchronization
            subs = [(n, c, Subscriber(nodes[n].port, c)) for c in convs for n in fronts]
            running = [(c, load(parley, nodes[front[c]].port, c, "r%d-%d" % (r, i), work))
                       for i, c in enumerate(convs)]
            loads.extend(p for _, (p, _, _) in running)
            ours = {c: Probe(nodes[front[c]].port, c, "probe%d-%d" % (r, i))
                    for i, c in enumerate(convs)}
            probes.extend(ours.values())
            try:
                rest_of_round(r, victim, front, subs, running, ours)
            finally:
                for p in ours.values():
                    p.stop = True
                for _, (p, _, _) in running:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                for _, _, s in subs:
                    s.close()

        def rest_of_round(r, victim, front, subs, running, ours):
            t_round = time.monotonic()
            end = time.monotonic() + DEADLINE_S
            for probe in ours.values():
                while len(probe.acks) < 10:  # the load is on before the kill
                    check(time.monotonic() < end and probe.error is None, "the probe appends",
                          probe.error)
                    time.sleep(0.02)  # polling interval, not a synchronization
            while time.monotonic() - t_round < KILL_AT_S:
                time.sleep(0.05)  # the kill's moment in the round, not a synchronization
            killed = time.monotonic()
            for probe in ours.values():
                probe.killed = killed
            nodes[victim].kill()
            # every conversation the victim owned is taken over by its front
            # (before the victim is back: no other node can have it)
            for k, c in enumerate(convs):
                if owner[c] != victim:
                    continue
                probe = ours[c]
                end = time.monotonic() + DEADLINE_S
                while probe.recovered is None:
                    check(time.monotonic() < end and probe.error is None,
                          "an append goes through the other node after the kill", c,
                          probe.error)
                    time.sleep(0.01)  # polling interval, not a synchronization
                failovers.append(probe.recovered - probe.killed)
                print("round %d: killed %s, owner of conversation %d; first append through %s "
                      "%.2f s after the kill (%d refusals)" % (r, victim, k, front[c],
                                                               failovers[-1], probe.refusals),
                      flush=True)
                owner[c] = front[c]
                taken[c] += 1
            start(victim)  # a new process: it owns nothing
            if r == 1:  # and one NATS server restarted under the load
                cluster.kill(2)
                cluster.restart(2)
                print("round %d: nats-server n2 restarted" % r, flush=True)
            for c, (p, out, err) in running:
                rc = p.wait(LOAD_S + 120)
                out.seek(0)
                err.seek(0)
                text = out.read()
                try:
                    rep = json.loads(text)
                except ValueError:
                    rep = {"verdict": "none", "verdict_detail": text + err.read()[-2000:]}
                report.append(rep)
                errs = {k: v for k, v in rep.get("errors", {}).items()}
                print("round %d: parley load on %s: %s, %s events, %s frames, cuts %s, "
                      "errors %s%s" % (r, front[c], rep.get("verdict"), rep.get("events"),
                                       rep.get("frames"), rep.get("faults", {}).get("cuts"),
                                       errs, "" if rc == 0 else ": " + rep["verdict_detail"]),
                      flush=True)
                check(rc == 0 and rep.get("verdict") == "pass", "parley load's verdict",
                      rc, rep.get("verdict_detail"))
            for probe in ours.values():
                probe.stop = True
                probe.join(DEADLINE_S)
                check(probe.error is None, "the probe ran without error", probe.error)
            for c in convs:
                ids = log_ids(nodes[front[c]].port, c)
                for n, sc, s in subs:
                    if sc != c:
                        continue
                    check(s.finish(len(ids)) and s.error is None,
                          "a subscriber on %s reads the whole log" % n, s.error, len(s.got),
                          len(ids))
                    check(s.got == ids, "a subscriber on %s saw every event once, in order" % n,
                          len(s.got), len(ids))

        for r in range(ROUNDS):
            run("round_%d_owner_killed" % r, a_round, r)

        def verdict():
            check(all(n >= 2 for n in taken.values()),
                  "both conversations were taken over after a kill in several rounds", taken)
            nc = Nats(cluster.url(1))
            try:
                for c in convs:
                    views = [log_ids(n.port, c) for n in nodes.values()]
                    ids = views[0]
                    check(all(v == ids for v in views), "every node reads the same log", c)
                    check(len(set(ids)) == len(ids), "no event twice", c)
                    at = {eid: i for i, eid in enumerate(ids)}
                    for p in probes:
                        if p.cid != c:
                            continue
                        for eid, idx in p.acks.items():
                            check(at.get(eid) == idx, "a probe's acked event at its acked index",
                                  eid, idx, at.get(eid))
                    recs = nc.records(c.replace("-", ""))
                    takeovers = check_chain(recs, ids, c)
                    # n1's first, then one for each kill of the owner
                    check(takeovers >= 1 + taken[c], "a take-over for each kill of its owner",
                          c, takeovers, taken[c])
                    print("conversation %s: %d events in %d records, %d take-overs, chain "
                          "checked" % (c, len(ids), len(recs), takeovers), flush=True)
            finally:
                nc.close()

        run("every_ack_once_at_its_index_no_fenced_append", verdict)
        if failovers:
            print("failover (SIGKILL of the owner -> first append acknowledged through another "
                  "node): %s s; median %.2f s, max %.2f s" % (
                      ", ".join("%.2f" % f for f in failovers), statistics.median(failovers),
                      max(failovers)), flush=True)

        def stop_all():
            # no node waited for the cluster on a loop thread, fence fights
            # and take-overs included (issue 22); each exits 0 after SIGTERM
            waits = {name: n.loop_requests() for name, n in nodes.items()}
            print("loop waits: %s" % waits, flush=True)
            check(all(w == 0 for w in waits.values()),
                  "parley_nats_loop_requests_total is 0 on every node", waits)
            for name, n in nodes.items():
                n.terminate()
                rc = n.proc.wait(60)
                check(rc == 0, "node %s exits 0 after SIGTERM" % name, rc)
                n.kill()

        run("nodes_stop_cleanly", stop_all)
        return summary(t0)
    finally:
        for p in loads:
            if p.poll() is None:
                p.kill()
                p.wait()
        for n in nodes.values():
            n.cleanup()


def main():
    # a SIGTERM (ctest's timeout) unwinds: every process started is stopped
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    return nats_cluster.main_on_cluster("parley-chaos.", on_cluster)


if __name__ == "__main__":
    sys.exit(main())
