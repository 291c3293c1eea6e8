#!/usr/bin/python3
"""malformed.py - raw-socket checks of `parley serve` against hostile HTTP/1.1.

Run by test_malformed.sh: malformed.py TMPDIR (with $PARLEY set). It starts
its own servers (each on a free port, with its own data directory under
TMPDIR), sends exact bytes and checks, for every case:

  - the status line;
  - that an error answer is one line of JSON, {"detail": "..."};
  - that the server closes the connection after an answer to a request it
    could not read (400, 408, 413, 417, 431, 505, and 503 at the cap): recv
    gives b"" (or a reset) right after the answer, with nothing more;
  - that the server is still fine afterwards: GET /alive on a new
    connection answers 200 {"status":"ok"}.

Every case runs even when an earlier one failed; the failures are listed at
the end and the exit status is 1 if there is any. Standard library only,
no sleeping for synchronization: every wait is a blocking read with a
generous deadline (timing bounds are checked only where the point of the
case is a deadline).
"""
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

PARLEY = os.environ["PARLEY"]
TMP = sys.argv[1]
WAIT = 20.0  # the longest any single read may take (ASan is slow)

UUID0 = "00000000-0000-4000-8000-000000000000"


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


# ---------------------------------------------------------------- servers ---


class Server:
    """`parley serve` on 127.0.0.1:0; the port from its first stdout line."""

    def __init__(self, name, *args):
        self.name = name
        env = dict(os.environ)
        env.pop("SESSION_API_KEY", None)  # no API key: the API is open
        self.errpath = os.path.join(TMP, name + ".stderr")
        self.err = open(self.errpath, "wb")
        cmd = [PARLEY, "serve", "--data", os.path.join(TMP, name), "--listen", "127.0.0.1:0",
               "--log-level", "warn", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, env=env)
        line = b""
        deadline = time.monotonic() + 60
        fd = self.proc.stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise Fail(f"{name}: serve printed no line within 60 s")
            b = os.read(fd, 1)
            if not b:
                raise Fail(f"{name}: serve exited {self.proc.wait()} before listening: "
                           f"{open(self.errpath, 'rb').read()[:500]!r}")
            line += b
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line.decode())
        if m is None:
            raise Fail(f"{name}: unexpected first line {line!r}")
        self.port = int(m.group(1))

    def conn(self):
        return Conn(self.port)

    def alive(self):
        """The server still answers on a fresh connection."""
        check(self.proc.poll() is None, f"{self.name}: the server died (exit {self.proc.poll()})")
        c = self.conn()
        c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        r = c.response()
        check(r.status == 200 and json.loads(r.body) == {"status": "ok"},
              f"{self.name}: GET /alive afterwards answered {r.line!r} {r.body[:200]!r}")
        c.close()

    def stop(self):
        """SIGTERM: a clean exit (0), no sanitizer report on stderr."""
        problems = []
        if self.proc.poll() is not None:
            problems.append(f"{self.name}: the server had already exited {self.proc.returncode}")
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
                problems.append(f"{self.name}: serve did not stop within 60 s of SIGTERM")
            if rc != 0:
                problems.append(f"{self.name}: serve exited {rc} after SIGTERM")
        self.err.close()
        err = open(self.errpath, "rb").read()
        for bad in (b"AddressSanitizer", b"runtime error:", b"LeakSanitizer"):
            if bad in err:
                problems.append(f"{self.name}: sanitizer report on stderr: "
                                f"{err[err.find(bad) - 200:][:1500]!r}")
        return problems


# ---------------------------------------------------------- connections ---


class Resp:
    def __init__(self, line, status, headers, body):
        self.line = line
        self.status = status
        self.headers = headers  # lower-case name -> value (the last one)
        self.body = body

    def header(self, name):
        return self.headers.get(name)


class Conn:
    """A client socket with a byte buffer: exact bytes out, answers in."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def try_send(self, data):
        """Send what the peer takes; False once it has stopped taking."""
        try:
            self.s.sendall(data)
            return True
        except OSError:
            return False

    def _fill(self, what):
        try:
            d = self.s.recv(65536)
        except socket.timeout:
            raise Fail(f"no {what} within {WAIT:.0f} s (have {self.buf[:200]!r})") from None
        except ConnectionResetError:
            raise Fail(f"connection reset while waiting for {what} (have {self.buf[:200]!r})") \
                from None
        if not d:
            raise Fail(f"connection closed while waiting for {what} (have {self.buf[:200]!r})")
        self.buf += d

    def response(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill("answer")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        line = lines[0].decode("latin-1")
        m = re.fullmatch(r"HTTP/1\.1 (\d{3}) [^\r\n]*", line)
        check(m is not None, f"bad status line {line!r}")
        headers = {}
        for h in lines[1:]:
            name, sep, value = h.decode("latin-1").partition(":")
            check(sep == ":" and name == name.strip(), f"bad header line {h!r}")
            headers[name.lower()] = value.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._fill("body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return Resp(line, int(m.group(1)), headers, body)

    def expect_closed(self, what="the answer"):
        """Nothing more comes, and the server closes: b"" (or a reset)."""
        check(self.buf == b"", f"extra bytes after {what}: {self.buf[:200]!r}")
        try:
            d = self.s.recv(65536)
        except socket.timeout:
            raise Fail(f"the connection was still open {WAIT:.0f} s after {what}") from None
        except ConnectionResetError:
            d = b""
        check(d == b"", f"bytes after {what} instead of a close: {d[:200]!r}")

    def expect_open(self):
        """The connection still serves: another request on it is answered."""
        self.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
        r = self.response()
        check(r.status == 200, f"keep-alive: the next request answered {r.line!r}")

    def close(self):
        self.s.close()


def check_detail(r):
    """An error answer: one line of JSON, an object with a "detail" string."""
    check(b"\n" not in r.body.rstrip(b"\n"), f"detail is not one line: {r.body[:300]!r}")
    try:
        j = json.loads(r.body)
    except ValueError:
        raise Fail(f"error body is not JSON: {r.body[:300]!r}") from None
    check(isinstance(j, dict) and isinstance(j.get("detail"), str) and j["detail"] != "",
          f'error body is not {{"detail": "..."}}: {r.body[:300]!r}')
    check((r.header("content-type") or "").startswith("application/json"),
          f"error answer Content-Type {r.header('content-type')!r}")


def expect_status(r, want):
    wants = want if isinstance(want, (tuple, set, list)) else (want,)
    check(r.status in wants, f"answered {r.line!r} {r.body[:120]!r}, wanted {want}")


def refused(srv, data, want, conn=None):
    """Send data; the answer is `want` with a detail, then a close."""
    c = conn or srv.conn()
    if data:
        c.send(data)
    r = c.response()
    expect_status(r, want)
    check_detail(r)
    check((r.header("connection") or "").lower() == "close",
          f"an answer before closing lacks 'Connection: close': {r.headers}")
    c.expect_closed()
    c.close()
    return r


def answered(srv, data, want):
    """Send data; the answer is `want` and the connection stays usable."""
    c = srv.conn()
    c.send(data)
    r = c.response()
    expect_status(r, want)
    if r.status >= 400:
        check_detail(r)
    c.expect_open()
    c.close()
    return r


def req(method, target, headers=(), body=None, version=b"HTTP/1.1", host=True):
    """Request bytes; headers are (name, value) byte pairs, sent as given."""
    out = method + b" " + target + b" " + version + b"\r\n"
    if host:
        out += b"Host: t\r\n"
    for n, v in headers:
        out += n + b": " + v + b"\r\n"
    if body is not None and not any(n.lower() in (b"content-length", b"transfer-encoding")
                                    for n, _ in headers):
        out += b"Content-Length: " + str(len(body)).encode() + b"\r\n"
    return out + b"\r\n" + (body or b"")


JSON = (b"Content-Type", b"application/json")
CONV = b"/api/conversations"

# ------------------------------------------------------------------ cases ---

CASES = []


def case(server):
    def deco(fn):
        CASES.append((server, fn))
        return fn
    return deco


# ---- framing: Content-Length, Transfer-Encoding, chunks

@case("limits")
def cl_with_te_chunked(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"2"),
                                   (b"Transfer-Encoding", b"chunked")]) + b"2\r\n{}\r\n0\r\n\r\n",
            400)


@case("limits")
def te_chunked_with_cl(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Transfer-Encoding", b"chunked"),
                                   (b"Content-Length", b"2")]) + b"2\r\n{}\r\n0\r\n\r\n", 400)


@case("limits")
def two_content_lengths_same(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"2"), (b"Content-Length", b"2")])
            + b"{}", 400)


@case("limits")
def two_content_lengths_different(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"2"), (b"Content-Length", b"4")])
            + b"{}{}", 400)


@case("limits")
def content_length_list(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"2, 2")]) + b"{}", 400)


@case("limits")
def content_length_not_a_number(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"+2")]) + b"{}", 400)


CHUNKED = req(b"POST", CONV, [JSON, (b"Transfer-Encoding", b"chunked")])


@case("limits")
def chunk_size_not_hex(s):
    refused(s, CHUNKED + b"zz\r\n{}\r\n0\r\n\r\n", 400)


@case("limits")
def chunk_size_negative(s):
    refused(s, CHUNKED + b"-2\r\n{}\r\n0\r\n\r\n", 400)


@case("limits")
def chunk_size_overflow(s):
    refused(s, CHUNKED + b"1" + b"0" * 16 + b"2\r\n{}\r\n0\r\n\r\n", 400)


@case("limits")
def chunk_size_huge_hex(s):
    refused(s, CHUNKED + b"f" * 40 + b"\r\n{}\r\n0\r\n\r\n", 400)


@case("limits")
def chunk_data_without_crlf(s):
    # the two bytes after a chunk's data must be CRLF; "XX" is not
    refused(s, CHUNKED + b"2\r\n{}XX0\r\n\r\n", 400)


@case("limits")
def chunk_data_bare_lf(s):
    refused(s, CHUNKED + b"2\r\n{}\n0\r\n\r\n", 400)


@case("limits")
def chunk_size_bare_lf(s):
    refused(s, CHUNKED + b"2\n{}\r\n0\r\n\r\n", 400)


@case("limits")
def te_not_chunked_last(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Transfer-Encoding", b"chunked, gzip")]) + b"{}", 400)


@case("limits")
def te_unknown_coding(s):
    # RFC 9112 6.1: a transfer coding the server does not understand is 501
    # (or refused as unreadable); reading the gzip'ed body as plain is wrong
    refused(s, req(b"POST", CONV, [JSON, (b"Transfer-Encoding", b"gzip, chunked")])
            + b"2\r\n{}\r\n0\r\n\r\n", (501, 400))


@case("limits")
def smuggling_get_cl0_te_chunked(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)


@case("limits")
def smuggling_te_space_before_colon(s):
    refused(s, b"POST /api/conversations HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
               b"Transfer-Encoding : chunked\r\n\r\n{}", 400)


# ---- request line and header syntax

@case("limits")
def bare_lf_request_line(s):
    refused(s, b"GET /alive HTTP/1.1\nHost: t\r\n\r\n", 400)


@case("limits")
def bare_lf_header(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n", 400)


@case("limits")
def bare_lf_end_of_headers(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\n\n", 400)


@case("limits")
def bare_cr_header(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n", 400)


@case("limits")
def header_name_with_space(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nX A: b\r\n\r\n", 400)


@case("limits")
def header_name_space_before_colon(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n", 400)


@case("limits")
def header_name_non_token(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nX(A): b\r\n\r\n", 400)


@case("limits")
def header_name_missing(s):
    # a header line with a value and no name: field-name is 1*tchar
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\n: v\r\n\r\n", 400)


@case("limits")
def header_without_colon(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nNoColonHere\r\n\r\n", 400)


@case("limits")
def header_value_nul(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n", 400)


@case("limits")
def obs_fold_space(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nX-A: b\r\n c\r\n\r\n", 400)


@case("limits")
def obs_fold_tab(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: t\r\nX-A: b\r\n\tc\r\n\r\n", 400)


@case("limits")
def request_line_without_target(s):
    refused(s, b"GET HTTP/1.1\r\nHost: t\r\n\r\n", 400)


@case("limits")
def request_line_method_only(s):
    refused(s, b"GET\r\nHost: t\r\n\r\n", 400)


@case("limits")
def request_line_garbage(s):
    refused(s, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 32, 400)


@case("limits")
def version_http2(s):
    refused(s, b"GET /alive HTTP/2.0\r\nHost: t\r\n\r\n", 505)


@case("limits")
def version_http3(s):
    refused(s, b"GET /alive HTTP/3.0\r\nHost: t\r\n\r\n", 505)


@case("limits")
def h2_preface(s):
    refused(s, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (400, 505))


# ---- limits: header bytes and lines, body bytes

@case("limits")
def header_bytes_under_limit(s):
    answered(s, req(b"GET", b"/alive", [(b"X-Big", b"a" * 3000)]), 200)


@case("limits")
def header_bytes_over_limit(s):
    refused(s, req(b"GET", b"/alive", [(b"X-Big", b"a" * 5000)]), 431)


@case("limits")
def header_bytes_over_limit_many_lines(s):
    refused(s, req(b"GET", b"/alive", [(b"X-%d" % i, b"v" * 60) for i in range(80)]), 431)


@case("limits")
def request_target_over_limit(s):
    refused(s, req(b"GET", b"/alive?x=" + b"a" * 5000), 431)


@case("limits")
def headers_100_lines(s):
    # Host plus 99 more: exactly the limit of 100 header lines
    answered(s, req(b"GET", b"/alive", [(b"X-%d" % i, b"1") for i in range(99)]), 200)


@case("limits")
def headers_101_lines(s):
    refused(s, req(b"GET", b"/alive", [(b"X-%d" % i, b"1") for i in range(100)]), 431)


@case("limits")
def headers_many_lines(s):
    refused(s, req(b"GET", b"/alive", [(b"X", b"") for i in range(300)]), 431)


def body_of(n):
    """A valid StartConversationRequest of exactly n bytes."""
    head, tail = BODY_HEAD, b'"}}'  # a tag value is at most 256 characters
    return head + b"a" * (n - len(head) - len(tail)) + tail


BODY_HEAD = b'{"agent":{"kind":"Agent","pad":"'


@case("limits")
def body_at_limit(s):
    r = answered(s, req(b"POST", CONV, [JSON], body_of(64 << 10)), 201)
    check(json.loads(r.body)["agent"]["pad"] == "a" * ((64 << 10) - len(BODY_HEAD) - 3),
          "the body was altered")


@case("limits")
def body_over_limit_content_length(s):
    # answered from the headers alone: no body is sent, and none is waited for
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"%d" % ((64 << 10) + 1))]), 413)


@case("limits")
def body_over_limit_huge_content_length(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"99999999999999")]), 413)


@case("limits")
def body_over_limit_chunked(s):
    c = s.conn()
    c.send(CHUNKED)
    piece = b"2000\r\n" + b"a" * 0x2000 + b"\r\n"  # 8 KiB chunks
    for _ in range(12):  # 96 KiB, over 64 KiB; stop once the answer is there
        if select.select([c.s], [], [], 0)[0] or not c.try_send(piece):
            break
    refused(s, b"", 413, conn=c)


@case("limits")
def body_over_limit_one_chunk_size(s):
    # a chunk size alone over the limit may be refused before its data
    c = s.conn()
    c.send(CHUNKED + b"20000\r\n")
    for _ in range(12):
        if select.select([c.s], [], [], 0)[0] or not c.try_send(b"a" * 0x2000):
            break
    refused(s, b"", 413, conn=c)


# ---- Expect

@case("limits")
def expect_100_continue(s):
    body = b'{"title":"continued"}'
    c = s.conn()
    c.send(req(b"POST", CONV, [JSON, (b"Content-Length", b"%d" % len(body)),
                               (b"Expect", b"100-continue")]))
    r = c.response()
    check(r.line == "HTTP/1.1 100 Continue" and r.body == b"",
          f"wanted 'HTTP/1.1 100 Continue' before the body, got {r.line!r}")
    c.send(body)
    r = c.response()
    expect_status(r, 201)
    check(json.loads(r.body).get("title") == "continued", f"created {r.body[:200]!r}")
    c.expect_open()
    c.close()


@case("limits")
def expect_100_continue_too_big(s):
    # no 100 Continue for a body that will be refused: 413 at once
    r = refused(s, req(b"POST", CONV, [JSON, (b"Content-Length", b"%d" % (1 << 20)),
                                       (b"Expect", b"100-continue")]), 413)
    check(r.status != 100, "100 Continue for a body over the limit")


@case("limits")
def expect_other(s):
    refused(s, req(b"POST", CONV, [JSON, (b"Expect", b"something-else")], b"{}"), 417)


# ---- pipelining and keep-alive

@case("limits")
def pipelined_three(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n" * 3)
    for i in range(3):
        r = c.response()
        check(r.status == 200 and json.loads(r.body) == {"status": "ok"},
              f"pipelined answer {i + 1}: {r.line!r} {r.body[:100]!r}")
        check(r.header("connection") is None, f"answer {i + 1} closes: {r.headers}")
    c.expect_open()
    c.close()


@case("limits")
def pipelined_in_order(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n"
           b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n"
           b"DELETE /alive HTTP/1.1\r\nHost: t\r\n\r\n"
           b"GET /api/conversations/" + UUID0.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n"
           b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
    got = [c.response().status for _ in range(5)]
    check(got == [200, 404, 405, 404, 200], f"pipelined answers {got}, wanted 200 404 405 404 200")
    c.expect_open()
    c.close()


@case("limits")
def pipelined_good_then_bad(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n"
           b"GET /alive HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n"
           b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    r = c.response()
    check(r.status == 200, f"the good request before a bad one answered {r.line!r}")
    refused(s, b"", 400, conn=c)


@case("limits")
def pipelined_after_post_body(s):
    # a body is read by its length: what follows it is the next request
    body = b'{"title":"pipe"}'
    c = s.conn()
    c.send(req(b"POST", CONV, [JSON], body) + b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    r1, r2 = c.response(), c.response()
    check(r1.status == 201 and r2.status == 200, f"answers {r1.line!r}, {r2.line!r}")
    c.close()


@case("limits")
def http10_without_keep_alive(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.0\r\n\r\n")
    r = c.response()
    check(r.status == 200 and json.loads(r.body) == {"status": "ok"}, f"answered {r.line!r}")
    c.expect_closed()
    c.close()


@case("limits")
def connection_close(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    r = c.response()
    check(r.status == 200, f"answered {r.line!r}")
    check((r.header("connection") or "").lower() == "close",
          f"no 'Connection: close' in the answer: {r.headers}")
    c.expect_closed()
    c.close()


@case("limits")
def connection_close_stops_pipeline(s):
    # nothing after a Connection: close request is answered
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
           b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    r = c.response()
    check(r.status == 200 and (r.header("connection") or "").lower() == "close",
          f"answered {r.line!r} {r.headers}")
    c.expect_closed()
    c.close()


# ---- bodies the API refuses (the connection stays open)

@case("limits")
def chunked_post_with_extensions_and_trailers(s):
    body = b'{"title":"chunky","tags":{"a":"b"}}'
    parts = [body[:5], body[5:17], body[17:]]
    data = (CHUNKED[:-2] + b"Trailer: X-Checksum\r\n\r\n"
            + b"%x;ext=1\r\n" % len(parts[0]) + parts[0] + b"\r\n"
            + b"%x;name\r\n" % len(parts[1]) + parts[1] + b"\r\n"
            + b"%x\r\n" % len(parts[2]) + parts[2] + b"\r\n"
            + b"0;last=\"yes\"\r\nX-Checksum: 42\r\nX-Other: a\r\n\r\n")
    r = answered(s, data, 201)
    check(json.loads(r.body).get("title") == "chunky", f"created {r.body[:200]!r}")


@case("limits")
def chunked_post_with_several_extensions(s):
    # chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ): RFC 9112 allows
    # several, but llhttp 8.1 (Debian 12's) refuses a second extension after
    # one with a value ("Invalid character in chunk size"). A known limit
    # (README): what matters here is that the refusal is clean - a 400 with
    # a detail and a close, never a body read wrong.
    body = b'{"title":"exts"}'
    data = CHUNKED + b"%x;a=b;c=d\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    refused(s, data, 400)
    # one extension with a value, or several without, are read
    data = CHUNKED + b"%x;a;c\r\n" % len(body) + body + b"\r\n0;x=y\r\n\r\n"
    answered(s, data, 201)


@case("limits")
def body_invalid_utf8(s):
    answered(s, req(b"POST", CONV, [JSON], b'{"title":"\xff\xfe\xc3("}'), 400)


@case("limits")
def body_invalid_utf8_overlong(s):
    answered(s, req(b"POST", CONV, [JSON], b'{"title":"\xc0\xaf"}'), 400)


@case("limits")
def body_invalid_json(s):
    answered(s, req(b"POST", CONV, [JSON], b'{"title":'), 400)


@case("limits")
def body_json_trailing_garbage(s):
    answered(s, req(b"POST", CONV, [JSON], b'{"title":"x"} {}'), 400)


@case("limits")
def body_json_nul(s):
    answered(s, req(b"POST", CONV, [JSON], b'{"title":"a\x00b"}'), 400)


# ---- percent-encoding in paths and queries

@case("limits")
def pct_bad_conversation_id(s):
    answered(s, req(b"GET", b"/api/conversations/%ZZ"), (400, 422))


@case("limits")
def pct_truncated_conversation_id(s):
    answered(s, req(b"GET", b"/api/conversations/%4"), (400, 422))


@case("limits")
def pct_nul_conversation_id(s):
    answered(s, req(b"GET", b"/api/conversations/%00"), (400, 404, 422))


@case("limits")
def pct_nul_event_id(s):
    answered(s, req(b"GET", b"/api/conversations/" + UUID0.encode() + b"/events/%00"),
             (400, 404, 422))


@case("limits")
def pct_nul_in_route(s):
    answered(s, req(b"GET", b"/alive%00"), (400, 404))


@case("limits")
def pct_nul_in_query(s):
    answered(s, req(b"GET", b"/api/conversations/search?title=%00"), (400, 422))


@case("limits")
def pct_bad_in_query(s):
    answered(s, req(b"GET", b"/api/conversations/search?limit=%G1"), (400, 422))


@case("limits")
def long_event_id(s):
    answered(s, req(b"GET", b"/api/conversations/" + UUID0.encode() + b"/events/" + b"e" * 300),
             (400, 404, 422))


# ---- what RFC 9112 requires of every request

@case("limits")
def host_missing(s):
    # RFC 9112 3.2: an HTTP/1.1 request without Host is a 400
    refused(s, b"GET /alive HTTP/1.1\r\n\r\n", 400)


@case("limits")
def host_twice(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400)


@case("limits")
def host_invalid(s):
    refused(s, b"GET /alive HTTP/1.1\r\nHost: a b\r\n\r\n", 400)


@case("limits")
def absolute_form_target(s):
    # RFC 9112 3.2.2: a server MUST accept the absolute-form
    answered(s, b"GET http://t/alive HTTP/1.1\r\nHost: t\r\n\r\n", 200)


@case("limits")
def head_answer_has_no_body(s):
    # whatever HEAD gets (200, or 405), its answer carries no content: the
    # bytes after its header block are the next answer, not a body
    c = s.conn()
    c.send(b"HEAD /alive HTTP/1.1\r\nHost: t\r\n\r\nGET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    while b"\r\n\r\n" not in c.buf:
        c._fill("HEAD answer")
    head, c.buf = c.buf.split(b"\r\n\r\n", 1)
    check(head.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 405 ")), f"HEAD answered {head[:200]!r}")
    while len(c.buf) < 9:
        c._fill("the answer after HEAD")
    check(c.buf.startswith(b"HTTP/1.1 "),
          f"a body followed the answer to HEAD: {head[:60]!r}... then {c.buf[:80]!r}")
    r = c.response()
    check(r.status == 200, f"the GET after HEAD answered {r.line!r}")
    c.close()


@case("limits")
def upgrade_ignored_keeps_http1(s):
    # an Upgrade the server does not take (no 101) leaves the connection
    # HTTP/1.1 (RFC 9110 7.8): what follows is the next request (curl
    # --http2 on http:// sends exactly this, then reuses the connection)
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n"
           b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
           b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
    r1 = c.response()
    check(r1.status == 200, f"the Upgrade request answered {r1.line!r}")
    r2 = c.response()
    check(r2.status == 200, f"the request after an ignored Upgrade answered {r2.line!r} {r2.body!r}")
    c.close()


# ---- error details are JSON even when they quote bad bytes

@case("limits")
def detail_quotes_invalid_utf8_path(s):
    answered(s, b"GET /\xff\xfe HTTP/1.1\r\nHost: t\r\n\r\n", (400, 404))


@case("limits")
def detail_quotes_invalid_utf8_id(s):
    answered(s, b"GET /api/conversations/\xff\xfe HTTP/1.1\r\nHost: t\r\n\r\n", (400, 404, 422))


@case("limits")
def detail_quotes_cut_utf8_id(s):
    # 40 three-byte characters: a detail that cuts the id at 80 bytes must
    # not cut a character in two
    answered(s, b"GET /api/conversations/" + "\u20ac".encode() * 40 + b" HTTP/1.1\r\nHost: t\r\n\r\n",
             (400, 404, 422))


@case("limits")
def detail_quotes_invalid_utf8_query(s):
    answered(s, req(b"GET", b"/api/conversations/search?limit=%FF"), (400, 422))


@case("limits")
def detail_quotes_invalid_utf8_timestamp(s):
    answered(s, req(b"GET", b"/api/conversations/" + UUID0.encode()
                    + b"/events/search?timestamp__gte=%FF%FE"), (400, 404, 422))


# ---- half-closed and vanishing peers

@case("limits")
def half_close_after_request(s):
    # the peer shuts its side after a whole request: it is still answered
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    c.s.shutdown(socket.SHUT_WR)
    r = c.response()
    check(r.status == 200, f"answered {r.line!r}")
    c.expect_closed()
    c.close()


@case("limits")
def half_close_mid_headers(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost")
    c.s.shutdown(socket.SHUT_WR)
    refused(s, b"", 400, conn=c)


@case("limits")
def half_close_mid_body(s):
    c = s.conn()
    c.send(req(b"POST", CONV, [JSON, (b"Content-Length", b"20")]) + b"{}")
    c.s.shutdown(socket.SHUT_WR)
    refused(s, b"", 400, conn=c)


@case("limits")
def half_close_silent(s):
    c = s.conn()
    c.s.shutdown(socket.SHUT_WR)
    c.expect_closed("a connection that sent nothing")
    c.close()


@case("limits")
def reset_with_requests_in_flight(s):
    # the peer vanishes (RST) while its requests are being handled: the
    # answers find no one, and nothing breaks
    for _ in range(5):
        c = s.conn()
        c.send(req(b"POST", CONV, [JSON], b'{"title":"gone"}') * 20
               + b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n" * 20)
        c.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()


@case("limits")
def pipelined_many(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n" * 1000)
    for i in range(1000):
        r = c.response()
        check(r.status == 200, f"pipelined answer {i + 1} of 1000: {r.line!r}")
    c.expect_open()
    c.close()


# ---- time limits (a server with short ones)

@case("timeouts")
def stops_mid_headers(s):
    c = s.conn()
    t0 = time.monotonic()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n")
    r = refused(s, b"", 408, conn=c)
    took = time.monotonic() - t0
    check(0.25 <= took <= 1.5, f"408 after {took:.3f} s; the header deadline is 300 ms "
                               "(the idle limit, 2 s, is not the one)")
    check("header" in json.loads(r.body)["detail"], f"408 detail {r.body!r}")


@case("timeouts")
def stops_mid_request_line(s):
    c = s.conn()
    c.send(b"GET /ali")
    refused(s, b"", 408, conn=c)


@case("timeouts")
def slowloris(s):
    # one byte every 100 ms: the deadline counts from the first byte, so the
    # 408 comes about 300 ms in, however steadily the bytes trickle
    c = s.conn()
    data = b"GET /alive HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 200
    t0 = time.monotonic()
    sent = 0
    while sent < len(data):
        if not c.try_send(data[sent:sent + 1]):
            break
        sent += 1
        if select.select([c.s], [], [], 0.1)[0]:  # paces the bytes, and sees the answer
            break
    took = time.monotonic() - t0
    check(sent < len(data), f"the server took all {sent} bytes over {took:.1f} s without a 408")
    refused(s, b"", 408, conn=c)
    check(0.25 <= took <= 1.5, f"408 after {took:.2f} s and {sent} bytes; the deadline is 300 ms")


@case("timeouts")
def idle_keep_alive_closed(s):
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    r = c.response()
    check(r.status == 200, f"answered {r.line!r}")
    t0 = time.monotonic()
    try:
        d = c.s.recv(65536)
    except socket.timeout:
        raise Fail(f"an idle keep-alive connection was still open after {WAIT:.0f} s") from None
    except ConnectionResetError:
        d = b""
    took = time.monotonic() - t0
    if d.startswith(b"HTTP/1.1 408"):  # a 408 before closing is fine too
        c.buf = d
        refused(s, b"", 408, conn=c)
    else:
        check(d == b"", f"an idle connection got {d[:200]!r}")
    check(took >= 1.5, f"an idle connection was closed after {took:.3f} s; --idle-timeout is 2s")


@case("timeouts")
def silent_connection_closed(s):
    c = s.conn()  # never sends a byte
    t0 = time.monotonic()
    try:
        d = c.s.recv(65536)
    except socket.timeout:
        raise Fail(f"a silent connection was still open after {WAIT:.0f} s") from None
    except ConnectionResetError:
        d = b""
    took = time.monotonic() - t0
    check(d == b"" or d.startswith(b"HTTP/1.1 408"), f"a silent connection got {d[:200]!r}")
    check(took >= 0.25, f"a silent connection was closed after {took:.3f} s")


@case("timeouts")
def body_stalls(s):
    c = s.conn()
    c.send(req(b"POST", CONV, [JSON, (b"Content-Length", b"20")]) + b'{"title"')
    t0 = time.monotonic()
    refused(s, b"", 408, conn=c)
    took = time.monotonic() - t0
    check(took >= 1.5, f"a stalled body got 408 after {took:.3f} s; --idle-timeout is 2s")


@case("timeouts")
def headers_in_time_then_answered(s):
    # the header deadline does not touch a request that is quick enough
    answered(s, req(b"GET", b"/alive"), 200)


# ---- the connection cap (a server with --max-connections 4)

@case("cap")
def connection_cap(s):
    held = []
    for i in range(4):
        c = s.conn()
        c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
        r = c.response()
        check(r.status == 200, f"connection {i + 1} of 4 answered {r.line!r}")
        held.append(c)
    # the 5th: refused at once, before it sends anything
    fifth = s.conn()
    r = refused(s, b"", 503, conn=fifth)
    check("connections" in json.loads(r.body)["detail"], f"503 detail {r.body!r}")
    # close one: the server sees the end, closes its side, and frees the slot
    # (its close is what we wait for, so no guessing when the count drops)
    held[0].s.shutdown(socket.SHUT_WR)
    held[0].expect_closed("our shutdown")
    held[0].close()
    c = s.conn()
    c.send(b"GET /alive HTTP/1.1\r\nHost: t\r\n\r\n")
    r = c.response()
    check(r.status == 200, f"after a slot was freed, a new connection answered {r.line!r}")
    held[0] = c
    # full again: the refused ones gave their slots back, no more, no less
    refused(s, b"", 503, conn=s.conn())
    for c in held[1:]:
        c.expect_open()
    for c in held:
        c.s.shutdown(socket.SHUT_WR)
        c.expect_closed("our shutdown")
        c.close()


# ------------------------------------------------------------------ main ---

SERVERS = {
    "limits": ["--max-header", "4KiB", "--max-body", "64KiB"],
    "timeouts": ["--header-timeout", "300ms", "--idle-timeout", "2s"],
    "cap": ["--max-connections", "4"],
}


def main():
    failures = []
    ran = 0
    for name, args in SERVERS.items():
        try:
            srv = Server(name, *args)
        except Fail as e:
            failures.append(f"[{name}] {e}")
            continue
        for sname, fn in CASES:
            if sname != name:
                continue
            ran += 1
            t0 = time.monotonic()
            try:
                fn(srv)
                if name != "cap":
                    srv.alive()
                print(f"ok   {fn.__name__} ({time.monotonic() - t0:.2f} s)", flush=True)
            except (Fail, OSError, ValueError, KeyError) as e:
                failures.append(f"{fn.__name__}: {type(e).__name__ + ': ' if not isinstance(e, Fail) else ''}{e}")
                print(f"FAIL {fn.__name__}: {e}", flush=True)
                if srv.proc.poll() is not None:
                    failures.append(f"[{name}] the server died (exit {srv.proc.returncode}); "
                                    f"stderr: {open(srv.errpath, 'rb').read()[-2000:]!r}")
                    break
        failures += srv.stop()
    print(f"{ran} cases, {len(failures)} failures")
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
