"""ws_frames_test.py - malformed client frames close that connection, with
RFC 6455's code, and no other; a client that stops reading is closed with
1013 at its bound while the others keep receiving every event.
Standard library only (raw sockets); no sleeps: waits are reads with a
deadline.
"""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, check  # noqa: E402
from ws_raw import DEADLINE, Reader, close_payload, frame, handshake  # noqa: E402


def msg(text):
    return {"source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


class Watcher:
    """A well-behaved raw client with envelopes: every event it gets."""

    def __init__(self, port, cid):
        self.s, rest = handshake(port, "/sockets/events/%s?envelope=index" % cid)
        self.r = Reader(self.s, rest)
        f = self.r.next()
        check(f is not None and b"full_state" in f[1], "no full_state first", f)
        self.got = []

    def until(self, n):
        """Read events until index n-1 has come; answer pings."""
        while not self.got or self.got[-1]["index"] < n - 1:
            f = self.r.next()
            check(f is not None, "a good client was closed")
            if f[0] == 0x9:
                self.s.sendall(frame(0xA, f[1]))
            elif f[0] == 0x1:
                self.got.append(json.loads(f[1]))
        idx = [g["index"] for g in self.got]
        check(idx == list(range(idx[0], n)), "a good client missed or repeated events", idx[-5:])


def malformed(srv, c, cid, w):
    big = b"x" * 5000  # over --ws-max-message 4096
    cases = [
        ("unmasked", frame(0x1, b"{}", mask=False), 1002),
        ("reserved bit", frame(0x1, b"{}", rsv=4), 1002),
        ("unknown opcode", frame(0x3, b""), 1002),
        ("fragmented ping", frame(0x9, b"a", fin=False), 1002),
        ("ping over 125 bytes", frame(0x9, b"p" * 126), 1002),
        ("continuation first", frame(0x0, b"x"), 1002),
        ("text not UTF-8", frame(0x1, b"\xc3\x28"), 1007),
        ("text cut in a character", frame(0x1, b"ok \xe2\x82"), 1007),
        ("message too big", frame(0x1, big), 1009),
        ("fragments too big", frame(0x1, big[:3000], fin=False) + frame(0x0, big[:3000]), 1009),
        ("close code 1005", frame(0x8, close_payload(1005)), 1002),
        ("close code 999", frame(0x8, close_payload(999)), 1002),
        ("close code 5000", frame(0x8, close_payload(5000)), 1002),
        ("one-byte close", frame(0x8, b"\x03"), 1002),
        ("close reason not UTF-8", frame(0x8, close_payload(1000, b"\xff")), 1007),
    ]
    n = 0
    for name, data, code in cases:
        s, rest = handshake(srv.port, "/sockets/events/" + cid)
        r = Reader(s, rest)
        s.sendall(data)
        got = r.close_code()
        check(got == code, "%s: closed with %s, wanted %d" % (name, got, code))
        check(r.next() is None, "%s: the socket stayed open after the close" % name)
        s.close()  # counted in /metrics before the server closed it
        # the good client is not affected: the next event reaches it
        c.expect("POST", "/api/conversations/%s/events/append" % cid, 201, msg("after " + name))
        n = c.expect("GET", "/api/conversations/%s/events/count" % cid, 200)
        w.until(n)


def stalled(srv, c, cid):
    """A client that never reads, with a small receive buffer: closed with
    1013 once its queue (--ws-queue 64KiB) has stayed full for 1 s, while 3
    good clients get every event, in order."""
    goods = [Watcher(srv.port, cid) for _ in range(3)]
    s, rest = handshake(srv.port, "/sockets/events/" + cid, rcvbuf=4096)
    pad = "y" * 4000
    start = time.monotonic()
    m = ""
    while 'parley_ws_closed_total{reason="stalled"} 1' not in m:
        check(time.monotonic() - start < DEADLINE, "the stalled client was never closed")
        c.expect("POST", "/api/conversations/%s/events/append" % cid, 201,
                 [msg(pad) for _ in range(8)])
        n = c.expect("GET", "/api/conversations/%s/events/count" % cid, 200)
        for w in goods:
            w.until(n)  # they keep up meanwhile
        m = c.request("GET", "/metrics").raw.decode()
    # its socket is over: whatever it had not read, then a close or a cut
    s.settimeout(DEADLINE)
    r = Reader(s, rest)
    code = r.close_code()
    check(code in (1013, None), "the stalled client closed with %s" % code)
    s.close()


def main():
    with Server(args=("--ws-max-message", "4096", "--ws-queue", "64KiB",
                      "--ws-stall-timeout", "1s")) as srv:
        c = srv.client()
        cid = c.expect("POST", "/api/conversations", 201, {})["id"]
        w = Watcher(srv.port, cid)
        malformed(srv, c, cid, w)
        m = c.request("GET", "/metrics").raw.decode()
        check('parley_ws_closed_total{reason="protocol"} 15' in m, "protocol closes not counted",
              [l for l in m.splitlines() if "ws_closed" in l])
        stalled(srv, c, cid)
    print("ws_frames_test: ok")


if __name__ == "__main__":
    main()
