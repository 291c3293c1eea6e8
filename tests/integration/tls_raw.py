#!/usr/bin/python3
"""tls_raw.py - the TLS cases of test_tls.sh that need exact bytes.

    tls_raw.py PORT SLOW_PORT CAFILE

PORT is `parley serve --tls-cert/--tls-key` with default limits, SLOW_PORT
the same with --header-timeout 300ms --idle-timeout 500ms. Checks plain
HTTP on the TLS port, close_notify before the server closes, keep-alive
and pipelining over TLS, a TLS connection moving to its conversations'
loop (PORT runs 2 worker loops), a request cut into one-byte records, a large
body, a forged record after the handshake, and a handshake trickled one
byte at a time (it must not outlive the time limits). Every case runs;
the failures are listed at the end (exit 1). Standard library only; every
wait is a blocking read with a deadline.
"""
import json
import os
import select
import socket
import ssl
import sys
import time
import uuid

PORT, SLOW_PORT, CAFILE = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
WAIT = 20.0


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def ctx():
    c = ssl.create_default_context(cafile=CAFILE)
    c.maximum_version = ssl.TLSVersion.TLSv1_2
    # Python sets this by default: a close without close_notify would read
    # as a clean end; here it must be an error (SSLEOFError)
    c.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    return c


def tls(port=PORT):
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    # ragged EOFs are errors here: a server must end with close_notify
    return ctx().wrap_socket(raw, server_hostname="localhost", suppress_ragged_eofs=False)


class Reader:
    def __init__(self, s):
        self.s = s
        self.buf = b""

    def fill(self, what):
        try:
            d = self.s.recv(65536)
        except socket.timeout:
            raise Fail(f"no {what} within {WAIT:.0f} s (have {self.buf[:200]!r})") from None
        check(d != b"", f"closed while waiting for {what} (have {self.buf[:200]!r})")
        self.buf += d

    def response(self):
        while b"\r\n\r\n" not in self.buf:
            self.fill("answer")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (h.partition(":") for h in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self.fill("body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return int(lines[0].split()[1]), headers, body


def get_alive(s):
    s.sendall(b"GET /alive HTTP/1.1\r\nHost: localhost\r\n\r\n")
    st, _, body = Reader(s).response()
    check(st == 200 and json.loads(body) == {"status": "ok"}, f"GET /alive: {st} {body!r}")


def alive():
    s = tls()
    get_alive(s)
    s.close()


def closed_raw(s, what):
    """Read a raw socket to its end; what came (bytes)."""
    got = b""
    t0 = time.monotonic()
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            raise Fail(f"{what}: still open after {time.monotonic() - t0:.1f} s") from None
        except ConnectionResetError:
            return got
        if not d:
            return got
        got += d


# ------------------------------------------------------------------ cases ---

def plain_http_on_tls_port():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=WAIT)
    s.sendall(b"GET /alive HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got = closed_raw(s, "plain HTTP on the TLS port")
    check(b"HTTP/1" not in got and b"status" not in got,
          f"plain HTTP on the TLS port got a cleartext answer: {got[:200]!r}")
    check(got == b"" or got[0] == 0x15, f"plain HTTP got something other than an alert: {got[:40]!r}")
    s.close()


def close_notify_on_connection_close():
    # the server ends a TLS connection with close_notify, not a bare FIN
    s = tls()
    s.sendall(b"GET /alive HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    r = Reader(s)
    st, h, _ = r.response()
    check(st == 200 and h.get("connection", "").lower() == "close", f"answered {st} {h}")
    try:
        d = s.recv(65536)
    except ssl.SSLError as e:  # UNEXPECTED_EOF_WHILE_READING
        raise Fail(f"the server closed without close_notify ({e})") from None
    check(d == b"" and r.buf == b"", f"bytes after the answer: {r.buf + d!r}")
    s.close()


def close_notify_on_error():
    s = tls()
    s.sendall(b"GET /alive HTTP/1.1\r\nHost: localhost\r\nBad Header: x\r\n\r\n")
    r = Reader(s)
    st, _, body = r.response()
    check(st == 400 and "detail" in json.loads(body), f"answered {st} {body!r}")
    try:
        d = s.recv(65536)
    except ssl.SSLError as e:
        raise Fail(f"the server closed without close_notify after a 400 ({e})") from None
    check(d == b"", f"bytes after the 400: {d!r}")
    s.close()


def keep_alive_and_pipelining():
    s = tls()
    get_alive(s)
    get_alive(s)
    s.sendall(b"GET /alive HTTP/1.1\r\nHost: localhost\r\n\r\n" * 3)
    r = Reader(s)
    for i in range(3):
        st, _, _ = r.response()
        check(st == 200, f"pipelined answer {i + 1} over TLS: {st}")
    s.close()


def ask(s, r, method, path, body=None):
    """One request on a kept-alive TLS socket; (status, body)."""
    data = json.dumps(body).encode() if body is not None else b""
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
              .encode() + data)
    st, _, got = r.response()
    return st, got


def moved_so_far():
    s = tls()
    st, got = ask(s, Reader(s), "GET", "/metrics")
    s.close()
    check(st == 200, f"GET /metrics: {st}")
    for line in got.decode().splitlines():
        if line.startswith("parley_http_connections_moved_total "):
            return float(line.split()[-1])
    return 0.0


def home_loop(cid, loops):
    """The loop a conversation lives on (actors/convs.c's loop_of, as in
    api_test.py): its id's first 8 bytes (little-endian), folded."""
    h = int.from_bytes(bytes.fromhex(cid.replace("-", ""))[:8], "little")
    return (h ^ (h >> 31)) % loops


def connection_moves_over_tls():
    """A TLS connection appending to conversations of another loop moves
    there between two requests, its session with it (net/conn.c), as
    often as they change loop: every append answered 201 on the one
    connection, each log holding its appends once, in order."""
    s = tls()
    r = Reader(s)
    st, got = ask(s, r, "GET", "/server_info")
    check(st == 200 and json.loads(got)["workers"] >= 2, f"two loops or more: {st} {got!r}")
    loops = json.loads(got)["workers"]
    by_loop = {}
    while len(by_loop) < 2:
        cid = str(uuid.uuid4())
        if home_loop(cid, loops) < 2:
            by_loop.setdefault(home_loop(cid, loops), cid)
    x, y = by_loop[0], by_loop[1]
    for cid in (x, y):
        st, got = ask(s, r, "POST", "/api/conversations", {"conversation_id": cid})
        check(st == 201, f"create {cid}: {st} {got[:200]!r}")
    before = moved_so_far()
    sent = {x: [], y: []}
    for rnd, cid in enumerate((x, y, x)):  # 5 in a row each: it moves after 4
        for i in range(5):
            eid = f"tls-mv-{rnd}-{i}"
            msg = {"id": eid, "source": "user", "kind": "MessageEvent",
                   "llm_message": {"role": "user", "content": [{"type": "text", "text": eid}]}}
            st, got = ask(s, r, "POST", f"/api/conversations/{cid}/events/append", msg)
            check(st == 201, f"append {eid} on the moving TLS connection: {st} {got[:200]!r}")
            sent[cid].append(eid)
    after = moved_so_far()
    check(after >= before + 2, f"moved to x's loop, y's, then x's again: {before} -> {after}")
    for cid, want in sent.items():
        st, got = ask(s, r, "GET", f"/api/conversations/{cid}/events/search?limit=100")
        ids = [e["id"] for e in json.loads(got)["items"]] if st == 200 else None
        check(ids == want, f"{cid}'s log: {ids} (wanted {want})")
    s.close()


def one_byte_records():
    s = tls()
    for b in b"GET /alive HTTP/1.1\r\nHost: localhost\r\n\r\n":
        s.sendall(bytes([b]))  # each its own TLS record
    st, _, body = Reader(s).response()
    check(st == 200, f"a request in one-byte records answered {st} {body!r}")
    s.close()


def large_body():
    pad = "a" * (4 << 20)
    body = json.dumps({"title": "big", "agent": {"kind": "Agent", "pad": pad}}).encode()
    s = tls()
    s.sendall(b"POST /api/conversations HTTP/1.1\r\nHost: localhost\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    st, _, out = Reader(s).response()
    check(st == 201, f"a 4 MiB body over TLS answered {st} {out[:200]!r}")
    check(json.loads(out)["agent"]["pad"] == pad, "the 4 MiB body came back altered")
    s.close()


def forged_record():
    # after a good exchange, a record that does not authenticate: the server
    # closes (with an alert at most), and goes on serving others
    s = tls()
    get_alive(s)
    raw = socket.socket(fileno=os.dup(s.fileno()))
    raw.settimeout(WAIT)
    raw.sendall(b"\x17\x03\x03\x00\x30" + bytes(range(48)))
    got = closed_raw(raw, "a forged record")
    check(b"HTTP/1" not in got, f"a forged record got {got[:100]!r}")
    raw.close()
    s.close()


def slow_handshake():
    # a ClientHello trickled one byte per 100 ms: the handshake is part of
    # the header deadline (300 ms), or at least of the idle one (500 ms),
    # counted from the first byte; it must not be kept up by the trickle
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx().wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    check(len(hello) > 100, f"no ClientHello to send ({len(hello)} bytes)")
    s = socket.create_connection(("127.0.0.1", SLOW_PORT), timeout=WAIT)
    t0 = time.monotonic()
    sent = 0
    while sent < len(hello) and time.monotonic() - t0 < 4.0:
        try:
            s.sendall(hello[sent:sent + 1])
        except OSError:
            break
        sent += 1
        if select.select([s], [], [], 0.1)[0]:
            break
    took = time.monotonic() - t0
    check(sent < len(hello), "the whole ClientHello went out, one byte per 100 ms")
    check(took < 4.0, f"a handshake trickled for {took:.1f} s ({sent} bytes) is still open; "
                      "the limits are 300 ms (headers) and 500 ms (idle)")
    closed_raw(s, "a trickled handshake")
    s.close()


def silent_tls_client():
    # connects, never says hello: closed by the idle limit
    s = socket.create_connection(("127.0.0.1", SLOW_PORT), timeout=WAIT)
    t0 = time.monotonic()
    got = closed_raw(s, "a silent connection on the TLS port")
    check(b"HTTP/1" not in got, f"a silent TLS client got {got[:100]!r}")
    check(time.monotonic() - t0 >= 0.25, "a silent TLS client was closed at once")
    s.close()


CASES = [plain_http_on_tls_port, close_notify_on_connection_close, close_notify_on_error,
         keep_alive_and_pipelining, connection_moves_over_tls, one_byte_records, large_body,
         forged_record, slow_handshake, silent_tls_client]


def main():
    failures = []
    for fn in CASES:
        t0 = time.monotonic()
        try:
            fn()
            alive()
            print(f"ok   {fn.__name__} ({time.monotonic() - t0:.2f} s)", flush=True)
        except (Fail, OSError, ValueError, KeyError) as e:
            what = str(e) if isinstance(e, Fail) else f"{type(e).__name__}: {e}"
            failures.append(f"{fn.__name__}: {what}")
            print(f"FAIL {fn.__name__}: {what}", flush=True)
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
