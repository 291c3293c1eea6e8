"""ws_exactly_once_test.py - the replay hands over to live delivery at an
exact index: a producer appends without pause over REST while 50 clients
(Python's websockets, envelope=index) connect at random points of its
progress (seeded RNG): some with resend_mode=all, some with after_id of an
event the producer got acknowledged over REST, a few live only. When the
producer stops, a marker event is appended; each client reads up to the
marker and must have exactly the events from its start index to the marker,
each once, in log order (dense indexes, the same events as REST search).

Bounded: a fixed number of events and clients, every wait has a deadline.
Run with /usr/bin/python3 (Debian's websockets). Usage: no arguments;
PARLEY=<binary>; optional SEED=<int>. Two rounds: the default --ws-queue,
then 4 KiB (most frames then come back from the log, not the queue).
"""

import asyncio
import http.client
import json
import os
import random
import sys
import threading
import time

import websockets
import websockets.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, check  # noqa: E402

T = 60              # seconds for any single wait (ASan builds are slow)
TOTAL_T = 600       # seconds for the whole run
CLIENTS = 50
EVENTS = 1500       # the producer appends at least this many, in batches of 1..8
MARKER = "exactly-once: the end"


def msg(text):
    return {"source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def call(port, method, path, body=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    if conn is None:
        c.close()
    return r.status, (json.loads(raw) if raw else None)


def rest_log(port, cid):
    out, page = [], None
    while True:
        qs = "?limit=100" + ("&page_id=" + page if page else "")
        st, b = call(port, "GET", "/api/conversations/%s/events/search%s" % (cid, qs))
        check(st == 200, "search", st, b)
        out += b["items"]
        page = b.get("next_page_id")
        if not page:
            return out


class Producer(threading.Thread):
    """Appends batches over one keep-alive connection until stopped (and at
    least EVENTS events); every acknowledged (id, index) goes to `acked`, and
    each acknowledgement is announced to the loop."""

    def __init__(self, port, cid, rng, loop, progress):
        super().__init__(daemon=True)
        self.port, self.cid, self.rng = port, cid, rng
        self.loop, self.progress = loop, progress
        self.acked = []
        self.stop = threading.Event()
        self.error = None
        self.slowest = 0.0

    def run(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=T)
            n = 0
            while n < EVENTS or not self.stop.is_set():
                k = self.rng.randint(1, 8)
                batch = [msg("p%d" % (n + i)) for i in range(k)]
                body = batch if k > 1 or self.rng.random() < 0.5 else batch[0]
                t0 = time.monotonic()
                st, b = call(self.port, "POST", "/api/conversations/%s/events/append" % self.cid,
                             body, conn)
                self.slowest = max(self.slowest, time.monotonic() - t0)
                check(st == 201 and len(b["events"]) == k, "producer append", st, b)
                self.acked.extend((e["id"], e["index"]) for e in b["events"])
                n += k
                self.loop.call_soon_threadsafe(self.progress.put_nowait, len(self.acked))
                if n > 20 * EVENTS:
                    raise RuntimeError("the producer ran away: the clients never all connected")
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported by the main task
            self.error = e
        finally:
            self.loop.call_soon_threadsafe(self.progress.put_nowait, None)


async def recv_frame(ws, what):
    try:
        raw = await asyncio.wait_for(ws.recv(), T)
    except asyncio.TimeoutError:
        check(False, "no frame within %d s (%s)" % (T, what))
    except websockets.exceptions.ConnectionClosed as e:
        check(False, "closed (%s) while waiting for %s" % (e.rcvd, what))
    check(isinstance(raw, str), "a binary frame", what)
    return json.loads(raw)


class Client:
    def __init__(self, n, trigger, mode):
        self.n, self.trigger, self.mode = n, trigger, mode
        self.start = None      # the first index it must get
        self.floor = None      # live only: the least first index it may get
        self.frames = []
        self.connected = asyncio.Event()

    def __repr__(self):
        return "client %d (%s, start %s, after %d acks)" % (self.n, self.mode, self.start,
                                                           self.trigger)

    async def run(self, port, cid, acked, rng):
        query = "?envelope=index"
        if self.mode == "all":
            query += "&resend_mode=all"
            self.start = 0
        elif self.mode == "after":
            # an event the producer has been acknowledged, the newest one at times
            ev_id, ev_index = acked[-1] if rng.random() < 0.2 else rng.choice(acked)
            query += "&after_id=" + ev_id
            self.start = ev_index + 1
        else:
            # events acknowledged before the connect are in the log already
            self.floor = acked[-1][1] + 1 if acked else 0
        ws = await websockets.connect("ws://127.0.0.1:%d/sockets/events/%s%s" % (port, cid, query),
                                      open_timeout=T, close_timeout=T, ping_interval=None,
                                      max_size=None, max_queue=None)
        try:
            f = await recv_frame(ws, "full_state of %r" % self)
            check(set(f) == {"event"} and f["event"].get("key") == "full_state",
                  "%r: the first frame is not an enveloped full_state" % self, f)
            self.connected.set()
            while True:
                f = await recv_frame(ws, "events of %r" % self)
                check(set(f) == {"index", "event"}, "%r: a frame that is not a log event" % self,
                      f)
                self.frames.append(f)
                content = f["event"].get("llm_message", {}).get("content", [{}])
                if content and content[0].get("text") == MARKER:
                    break
        finally:
            await ws.close()


async def round_(seed, args):
    print("seed %d, serve %s" % (seed, " ".join(args) or "(defaults)"), flush=True)
    rng = random.Random(seed)
    with Server(args=args) as srv:
        port = srv.port
        st, conv = call(port, "POST", "/api/conversations", {"stuck_detection": False})
        check(st == 201, "create", st, conv)
        cid = conv["id"]
        st, b = call(port, "POST", "/api/conversations/%s/events/append" % cid,
                     [msg("seed %d" % i) for i in range(10)])
        check(st == 201, "seed events", st, b)
        seeded = [(e["id"], e["index"]) for e in b["events"]]

        modes = ["all"] * 20 + ["after"] * 24 + ["live"] * 6
        rng.shuffle(modes)
        clients = sorted((Client(i, rng.randrange(EVENTS), modes[i]) for i in range(CLIENTS)),
                         key=lambda c: c.trigger)
        loop = asyncio.get_running_loop()
        progress = asyncio.Queue()
        producer = Producer(port, cid, random.Random(seed + 1), loop, progress)
        producer.acked.extend(seeded)
        t_start = time.monotonic()
        producer.start()

        # start each client once the producer has had `trigger` events acknowledged
        tasks, pending = [], list(clients)
        while pending:
            n = await asyncio.wait_for(progress.get(), T)
            check(n is not None, "the producer stopped: %r" % producer.error)
            while pending and n - len(seeded) >= pending[0].trigger:
                c = pending.pop(0)
                tasks.append(asyncio.ensure_future(
                    c.run(port, cid, list(producer.acked), rng)))
        # every client has subscribed: then the producer stops, then the marker
        for c, t in zip(clients, tasks):
            done, _ = await asyncio.wait([asyncio.ensure_future(c.connected.wait()), t],
                                         timeout=T, return_when=asyncio.FIRST_COMPLETED)
            check(done, "%r did not subscribe within %d s" % (c, T))
            if t in done:
                t.result()  # it failed: say why
        producer.stop.set()
        await loop.run_in_executor(None, producer.join, T)
        check(not producer.is_alive(), "the producer did not stop")
        check(producer.error is None, "producer: %r" % producer.error)
        st, b = call(port, "POST", "/api/conversations/%s/events/append" % cid, msg(MARKER))
        check(st == 201, "the marker", st, b)
        marker = b["events"][0]
        left = max(T, TOTAL_T - (time.monotonic() - t_start))
        await asyncio.wait_for(asyncio.gather(*tasks), left)

        log = rest_log(port, cid)
        ids = [e["id"] for e in log]
        check(len(set(ids)) == len(ids), "an event id is twice in the log")
        check(ids[marker["index"]] == marker["id"] and len(log) == marker["index"] + 1,
              "the marker is not the last event, at its index", marker, len(log))
        for ev_id, index in producer.acked:
            check(index < len(ids) and ids[index] == ev_id,
                  "acknowledged event %s is not at index %d in REST search" % (ev_id, index))
        end = marker["index"] + 1
        for c in clients:
            idx = [f["index"] for f in c.frames]
            if c.start is None:
                c.start = idx[0] if idx else end
                check(c.start >= c.floor, "%r got event %d, from before it subscribed (>= %d)"
                      % (c, c.start, c.floor))
            want = list(range(c.start, end))
            if idx != want:
                dup = sorted({i for i in idx if idx.count(i) > 1})
                missing = sorted(set(want) - set(idx))
                check(False, "%r: indexes are not %d..%d, each once, in order" %
                      (c, c.start, end - 1), "first %s" % idx[:5], "last %s" % idx[-5:],
                      "duplicates %s" % dup[:10], "missing %s" % missing[:10],
                      "out of order at %s" % next((i for i in range(1, len(idx))
                                                   if idx[i] <= idx[i - 1]), None))
            got = [f["event"] for f in c.frames]
            check(got == log[c.start:end], "%r: the events are not REST search's" % c)
        counts = {m: sum(1 for c in clients if c.mode == m) for m in ("all", "after", "live")}
        print("  ok: %d events, %d clients %s, each got its events exactly once in order "
              "(slowest append %.2f s, %.1f s in all)" %
              (len(log), len(clients), counts, producer.slowest, time.monotonic() - t_start))
        check(srv.died() is None, "serve died", srv.died())


async def main():
    seed = int(os.environ.get("SEED", "20261122"))
    # the default queue; then a 4 KiB one, so that most frames are read back
    # from the log after the socket drained (the slow-socket path)
    await round_(seed, ())
    await round_(seed + 7, ("--ws-queue", "4KiB"))
    print("ws_exactly_once_test: ok")


if __name__ == "__main__":
    asyncio.run(main())
