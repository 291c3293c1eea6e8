"""ws_stalled_test.py - a WebSocket client that never reads is closed, and
costs the others nothing (raw sockets, standard library only).

The server runs with --ws-queue 64KiB --ws-stall-timeout 1s. One client
upgrades with a small SO_RCVBUF (set before connect) and then never reads;
three normal clients (envelope=index) read everything. A producer appends
4 KiB events over REST until /metrics counts the stalled close
(parley_ws_closed_total{reason="stalled"}), or fails at a deadline. Then:
the stalled socket, drained, ends (EOF or reset), with a 1013 close frame
if one made it, and what it did get is a gapless prefix of the log; the
stalled counter is exactly 1; after a marker event, each normal client has
every event exactly once, in log order, as REST search has them.
"""

import json
import os
import re
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, check  # noqa: E402
from ws_malformed_test import CLOSE, TEXT, RawWS, close_payload, frame  # noqa: E402

T = 60                # seconds for a single wait
DEADLINE = 180        # seconds for the stalled socket to be closed, at most
MAX_EVENTS = 10000    # the producer gives up after this many (40 MB; ~1,600 are needed)
EVENT_TEXT = 4096
MARKER = "stalled test: the end"


def msg(text):
    return {"source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def stalled_count(api):
    r = api.request("GET", "/metrics")
    check(r.status == 200, "GET /metrics", r)
    m = re.search(r'^parley_ws_closed_total\{reason="stalled"\} (\d+)$',
                  r.raw.decode("utf-8", "replace"), re.M)
    check(m, "no parley_ws_closed_total{reason=\"stalled\"} in /metrics", r.raw[:2000])
    return int(m.group(1))


class Reader(threading.Thread):
    """A normal client: reads every frame (answering pings) up to the marker."""

    def __init__(self, port, path, n):
        super().__init__(daemon=True)
        self.ws = RawWS(port, path)
        f = self.ws.json()
        check(set(f) == {"event"} and f["event"].get("key") == "full_state",
              "reader %d: the first frame is not full_state" % n, f)
        self.n, self.got, self.error = n, [], None

    def run(self):
        try:
            while True:
                f = self.ws.json()
                check(set(f) == {"index", "event"}, "reader %d: not a log event" % self.n, f)
                self.got.append((f["index"], f["event"]))
                if f["event"]["llm_message"]["content"][0]["text"] == MARKER:
                    return
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = e


def drain(sock):
    """Everything the stalled socket still gets, up to EOF or a reset:
    -> (bytes, how it ended)."""
    buf = b""
    deadline = time.monotonic() + T
    while True:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            got = sock.recv(1 << 20)
        except ConnectionResetError:
            return buf, "reset"
        except socket.timeout:
            check(False, "the stalled socket, drained, did not end within %d s" % T,
                  "%d bytes read" % len(buf))
        if not got:
            return buf, "eof"
        buf += got


def frames_of(buf):
    """Server frames parsed from bytes; a cut last frame is left out."""
    out = []
    while len(buf) >= 2:
        n, at = buf[1] & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                break
            n, at = struct.unpack(">H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, at = struct.unpack(">Q", buf[2:10])[0], 10
        if len(buf) < at + n:
            break
        check(not buf[1] & 0x80 and buf[0] & 0x70 == 0, "a bad server frame header", buf[:4])
        out.append((buf[0] & 0x0F, buf[at:at + n]))
        buf = buf[at + n:]
    return out, len(buf)


def main():
    with Server(args=("--ws-queue", "64KiB", "--ws-stall-timeout", "1s")) as srv:
        api = srv.client()
        cid = api.expect("POST", "/api/conversations", 201, {"stuck_detection": False})["id"]
        path = "/sockets/events/%s?envelope=index" % cid
        readers = [Reader(srv.port, path, i) for i in range(3)]
        for r in readers:
            r.start()
        stalled = RawWS(srv.port, path, rcvbuf=4096)  # and then never read
        check(stalled_count(api) == 0, "a stalled close before anything was sent")

        t0 = time.monotonic()
        appended, slowest, closed_after = 0, 0.0, None
        pad = "s" * (EVENT_TEXT - 32)
        while True:
            a0 = time.monotonic()
            api.expect("POST", "/api/conversations/%s/events/append" % cid, 201,
                       msg("%06d %s" % (appended, pad)))
            slowest = max(slowest, time.monotonic() - a0)
            appended += 1
            if stalled_count(api) >= 1:
                closed_after = time.monotonic() - t0
                break
            if time.monotonic() - t0 > DEADLINE or appended >= MAX_EVENTS:
                try:  # what became of it once read
                    _, how = drain(stalled.s)
                    seen = "drained then, it ended (%s); /metrics then says stalled=%d" % (
                        how, stalled_count(api))
                except Exception:  # noqa: BLE001
                    seen = "drained then, it stayed open"
                check(False, "the stalled socket was not closed as stalled: %d events of %d "
                      "bytes appended in %.0f s; %s" % (appended, EVENT_TEXT,
                                                        time.monotonic() - t0, seen))
            for r in readers:
                check(r.is_alive() or r.error is None, "reader %d: %r" % (r.n, r.error))
                check(r.error is None, "reader %d: %r" % (r.n, r.error))

        # the stalled socket: a prefix of the stream, then the end
        buf, how = drain(stalled.s)
        stalled.close()
        frames, cut = frames_of(buf)
        check(frames and frames[0][0] == TEXT and
              json.loads(frames[0][1]).get("event", {}).get("key") == "full_state",
              "the stalled socket's first frame is not full_state", frames[:1])
        codes = [struct.unpack(">H", p[:2])[0] for op, p in frames if op == CLOSE and len(p) >= 2]
        reasons = [p[2:].decode("utf-8", "replace") for op, p in frames if op == CLOSE]
        check(all(c == 1013 for c in codes), "the stalled socket was closed with %s" % codes,
              reasons)
        events = [json.loads(p) for op, p in frames[1:] if op == TEXT]
        check([e["index"] for e in events] == list(range(len(events))),
              "the stalled socket's events are not 0..n", [e["index"] for e in events][:20])

        # the counter: exactly this one socket
        st = stalled_count(api)
        check(st == 1, "parley_ws_closed_total{reason=\"stalled\"} is %d, wanted 1 (a normal "
              "client was closed as stalled?)" % st)

        # the normal clients: everything, once, in order
        ack = api.expect("POST", "/api/conversations/%s/events/append" % cid, 201,
                         msg(MARKER))["events"][0]
        for r in readers:
            r.join(T)
            check(not r.is_alive(), "reader %d did not get the marker within %d s" % (r.n, T),
                  len(r.got))
            check(r.error is None, "reader %d: %r" % (r.n, r.error))
        log, page = [], None
        while True:
            b = api.expect("GET", "/api/conversations/%s/events/search?limit=100%s" %
                           (cid, "&page_id=" + page if page else ""), 200)
            log += b["items"]
            page = b.get("next_page_id")
            if not page:
                break
        check(len(log) == appended + 1 and log[-1]["id"] == ack["id"], "the log", len(log))
        for e in events:
            check(e["event"] == log[e["index"]], "the stalled socket got another event at %d"
                  % e["index"])
        for r in readers:
            idx = [i for i, _ in r.got]
            check(idx == list(range(len(log))), "reader %d: indexes are not 0..%d once in order"
                  % (r.n, len(log) - 1), idx[:5], idx[-5:], len(idx))
            check([e for _, e in r.got] == log, "reader %d: not the log's events" % r.n)
            r.ws.send(frame(CLOSE, close_payload(1000)))
            r.ws.close()
        check(srv.died() is None, "serve died", srv.died())
        print("ws_stalled_test: ok: closed after %d events (%.1f s; slowest append %.2f s); "
              "the stalled socket got %d events (%d bytes, %d cut), a close %s, then %s"
              % (appended, closed_after, slowest, len(events), len(buf), cut,
                 codes or "frame: none", how))


if __name__ == "__main__":
    main()
