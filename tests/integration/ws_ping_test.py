"""ws_ping_test.py - the server's keep-alive pings over a raw socket:
a client that answers them stays, one that does not is closed with 1001.
Standard library only; no sleeps: every wait reads the socket until a
deadline.
"""

import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, check  # noqa: E402
from ws_raw import DEADLINE, Reader, frame, handshake  # noqa: E402


def main():
    with Server(args=("--ws-ping-interval", "200ms")) as srv:
        c = srv.client()
        cid = c.expect("POST", "/api/conversations", 201, {})["id"]
        path = "/sockets/events/" + cid

        # answers every ping: still open after three of them
        s, rest = handshake(srv.port, path)
        r = Reader(s, rest)
        pings = 0
        while pings < 3:
            f = r.next()
            check(f is not None, "closed although every ping was answered")
            if f[0] == 0x9:
                pings += 1
                s.sendall(frame(0xA, f[1]))
            else:
                check(f[0] == 0x1, "unexpected frame", f)
        s.sendall(frame(0x8, struct.pack(">H", 1000)))
        f = r.next()
        while f is not None and f[0] != 0x8:
            f = r.next()
        check(f is not None and struct.unpack(">H", f[1][:2])[0] == 1000,
              "our close was not echoed with 1000", f)
        s.close()

        # never answers: a ping, then a close with 1001 at the next one
        s, rest = handshake(srv.port, path)
        r = Reader(s, rest)
        start = time.monotonic()
        seen_ping, code = False, None
        while True:
            f = r.next()
            check(f is not None, "the socket was cut without a close frame")
            if f[0] == 0x9:
                seen_ping = True
            elif f[0] == 0x8:
                code = struct.unpack(">H", f[1][:2])[0]
                break
        check(seen_ping, "no ping before the close")
        check(code == 1001, "closed with %s, wanted 1001" % code)
        check(time.monotonic() - start < DEADLINE, "the close took too long")
        s.sendall(frame(0x8, struct.pack(">H", 1001)))
        check(r.next() is None, "the server did not close the socket after the close")
        s.close()  # the server counted the close before it closed the socket
        m = c.request("GET", "/metrics").raw.decode()
        check('parley_ws_closed_total{reason="ping"} 1' in m, "the close is not counted", m[-800:])
    print("ws_ping_test: ok")


if __name__ == "__main__":
    main()
