"""ws_malformed_test.py - RFC 6455 protocol errors over raw sockets (standard
library only): after a real handshake (Sec-WebSocket-Accept checked), each
case sends what no library would and reads the server's close frame:

  1002: an unmasked client frame, reserved bits, reserved opcodes, a
        fragmented control frame, a control frame over 125 bytes, a
        continuation with no message started, a new message inside a
        fragmented one, bad close codes (1005, 1006, 999, ...), a 1-byte
        close payload;
  1007: invalid UTF-8 in a text message (one frame or across fragments) or
        in a close reason;
  1009: a message over --ws-max-message (4096 here), in one frame, in
        fragments, or announced by a frame header only.

Also what must NOT close: a message of exactly 4096 bytes, UTF-8 split
across fragments, pings inside a fragmented message, empty frames; a client
close is echoed. Every server frame is checked (unmasked, no reserved bits,
control frames final and short). Meanwhile one well-behaved client on the
same conversation (resend_mode=all, envelope=index) receives a live event
after each case; at the end it must have the whole log, each event once.

The RawWS class is shared with ws_stalled_test.py.
"""

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, TestFailure, check  # noqa: E402

T = 60  # seconds for anything that takes a second (ASan builds are slow)
MAX_MESSAGE = 4096
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


def frame(opcode, payload=b"", fin=True, mask=True, rsv=0, length=None):
    """One client frame. length: the length to announce (default: the payload's)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def close_payload(code, reason=b""):
    return struct.pack(">H", code) + reason


class RawWS:
    """A WebSocket client over a plain socket that does only what it is told."""

    def __init__(self, port, path, rcvbuf=None, headers=(), upgrade="websocket",
                 connection="Upgrade", before=b"", after=b""):
        """headers: more header lines; before: a request sent first on the
        same connection (its answer is read and dropped); after: bytes sent
        in the same write as the upgrade request (pipelined frames)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect
        s.settimeout(T)
        s.connect(("127.0.0.1", port))
        self.s = s
        key = base64.b64encode(os.urandom(16))
        req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: %s\r\n"
               "Connection: %s\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
               % (path, port, upgrade, connection, key.decode()))
        for h in headers:
            req += h + "\r\n"
        s.sendall(before + (req + "\r\n").encode() + after)
        if before:
            status, hdrs = self._head()
            check(status.startswith("HTTP/1.1 200"), "the request before the upgrade", status)
            n = int(hdrs.get("content-length", "0"))
            while n > 0:
                got = s.recv(n)
                check(got, "the server closed after the request before the upgrade")
                n -= len(got)
        status, hdrs = self._head()
        check(status.startswith("HTTP/1.1 101"), "no 101 for %s" % path, status, hdrs)
        want = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        check(hdrs.get("sec-websocket-accept") == want, "Sec-WebSocket-Accept", hdrs, want)
        check(hdrs.get("upgrade", "").lower() == "websocket", "Upgrade: websocket", hdrs)
        check("upgrade" in hdrs.get("connection", "").lower(), "Connection: Upgrade", hdrs)
        self.headers = hdrs
        self.buf, self.path = b"", path
        self.auto_pong = True
        self.pongs = []

    def _head(self):
        """Read one response head: -> (status line, {lower-case name: value})."""
        buf = b""
        while b"\r\n\r\n" not in buf:
            got = self.s.recv(1)  # byte by byte: nothing past the head is taken
            check(got, "the server closed during the handshake", buf)
            buf += got
        lines = buf[:-4].decode("latin-1").split("\r\n")
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        return lines[0], hdrs

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False  # the server closed already: its close frame says why

    def _fill(self, deadline):
        """More bytes; False at EOF or reset."""
        self.s.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            got = self.s.recv(65536)
        except socket.timeout:
            check(False, "%s: nothing from the server within %d s" % (self.path, T))
        except ConnectionResetError:
            return False
        if not got:
            return False
        self.buf += got
        return True

    def raw_frame(self, deadline=None):
        """(fin, opcode, payload) of the next server frame; None at EOF."""
        deadline = deadline or time.monotonic() + T
        while True:
            b = self.buf
            if len(b) >= 2:
                n, at = b[1] & 0x7F, 2
                if n == 126:
                    n, at = (struct.unpack(">H", b[2:4])[0], 4) if len(b) >= 4 else (None, 4)
                elif n == 127:
                    n, at = (struct.unpack(">Q", b[2:10])[0], 10) if len(b) >= 10 else (None, 10)
                if n is not None and len(b) >= at + n:
                    fin, rsv, op = b[0] >> 7, (b[0] >> 4) & 7, b[0] & 0x0F
                    check(not b[1] & 0x80, "a server frame is masked", b[:16])
                    check(rsv == 0, "a server frame has reserved bits", b[:16])
                    check(op in (CONT, TEXT, BINARY, CLOSE, PING, PONG), "server opcode %d" % op)
                    if op >= 0x8:
                        check(fin and n <= 125, "a server control frame is fragmented or long")
                    payload = b[at:at + n]
                    self.buf = b[at + n:]
                    return fin, op, payload
            if not self._fill(deadline):
                check(not self.buf, "the connection ended inside a frame", self.buf[:32])
                return None

    def message(self, deadline=None):
        """(opcode, payload) of the next data or close frame (pings answered,
        pongs kept in self.pongs); None at EOF."""
        parts, first = [], None
        while True:
            f = self.raw_frame(deadline)
            if f is None:
                return None
            fin, op, payload = f
            if op == PING:
                if self.auto_pong:
                    self.send(frame(PONG, payload))
                continue
            if op == PONG:
                self.pongs.append(payload)
                continue
            if op == CLOSE:
                return op, payload
            if op == CONT:
                check(first is not None, "a server continuation without a start")
            else:
                check(first is None, "a server data frame inside a fragmented message")
                first = op
            parts.append(payload)
            if fin:
                data = b"".join(parts)
                if first == TEXT:
                    data.decode("utf-8")  # raises on invalid UTF-8 from the server
                return first, data

    def json(self, deadline=None):
        """The next message, a JSON text frame (fail on a close or EOF)."""
        m = self.message(deadline)
        check(m is not None and m[0] == TEXT, "%s: wanted a text frame, got %r" % (self.path, m))
        return json.loads(m[1])

    def close_code(self):
        """Read to the server's close frame: -> (code or None for an empty
        payload, frames before it). Fails if the socket ends without one."""
        before = []
        while True:
            m = self.message()
            check(m is not None, "%s: the connection ended without a close frame" % self.path,
                  before[-3:])
            if m[0] == CLOSE:
                p = m[1]
                check(len(p) != 1, "a 1-byte close payload from the server")
                return (struct.unpack(">H", p[:2])[0] if p else None), before
            before.append(m)

    def expect_eof(self):
        """After the close handshake the server ends the TCP connection."""
        deadline = time.monotonic() + T
        while True:
            try:
                if not self._fill(deadline):
                    return
            except Exception:
                raise
            check(len(self.buf) < 1 << 20, "data after the close frame", self.buf[:64])

    def close(self):
        self.s.close()


def msg(text):
    return {"source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def main():
    with Server(args=("--ws-max-message", str(MAX_MESSAGE), "--ws-ping-interval", "0")) as srv:
        api = srv.client()
        cid = api.expect("POST", "/api/conversations", 201, {"stuck_detection": False})["id"]
        api.expect("POST", "/api/conversations/%s/events/append" % cid, 201,
                   [msg("before %d" % i) for i in range(3)])
        path = "/sockets/events/%s" % cid
        good = RawWS(srv.port, path + "?resend_mode=all&envelope=index")
        f = good.json()
        check(set(f) == {"event"} and f["event"].get("key") == "full_state",
              "the good client's first frame is not full_state", f)
        good_events = []  # (index, event)

        def good_gets_live(label):
            """Append a live event; the good client must get it next (after
            the events before it)."""
            ack = api.expect("POST", "/api/conversations/%s/events/append" % cid, 201,
                             msg("live after %s" % label))["events"][0]
            while True:
                f = good.json()
                check(set(f) == {"index", "event"}, "the good client got a non-log frame "
                      "(another socket's error?) after %s" % label, f)
                good_events.append((f["index"], f["event"]))
                if f["event"]["id"] == ack["id"]:
                    check(f["index"] == ack["index"], "the live event's index", f, ack)
                    return

        good_gets_live("the start")
        big = b"x" * 200
        closing_cases = [
            # (name, bytes to send, the close code wanted or a set of them)
            ("unmasked text frame", frame(TEXT, b'{"role":"user"}', mask=False), 1002),
            ("unmasked ping", frame(PING, b"p", mask=False), 1002),
            ("unmasked close", frame(CLOSE, close_payload(1000), mask=False), 1002),
            ("RSV1 on a text frame", frame(TEXT, b"{}", rsv=4), 1002),
            ("RSV2 on a text frame", frame(TEXT, b"{}", rsv=2), 1002),
            ("RSV3 on a text frame", frame(TEXT, b"{}", rsv=1), 1002),
            ("RSV1 on a ping", frame(PING, b"x", rsv=4), 1002),
            ("RSV1 on a continuation", frame(TEXT, b"[", fin=False) + frame(CONT, b"]", rsv=4),
             1002),
            ("reserved data opcode 0x3", frame(0x3, b"x"), 1002),
            ("reserved data opcode 0x7", frame(0x7, b"x"), 1002),
            ("reserved control opcode 0xB", frame(0xB, b"x"), 1002),
            ("reserved control opcode 0xF", frame(0xF, b""), 1002),
            ("fragmented ping", frame(PING, b"ab", fin=False), 1002),
            ("fragmented close", frame(CLOSE, close_payload(1000), fin=False), 1002),
            ("fragmented pong", frame(PONG, b"ab", fin=False), 1002),
            ("ping of 126 bytes", frame(PING, b"p" * 126), 1002),
            ("pong of 200 bytes", frame(PONG, big), 1002),
            ("close of 126 bytes", frame(CLOSE, close_payload(1000, b"r" * 124)), 1002),
            ("continuation without a start", frame(CONT, b"{}"), 1002),
            ("continuation without a start, final=0", frame(CONT, b"{", fin=False), 1002),
            ("text inside a fragmented text", frame(TEXT, b'"a', fin=False) + frame(TEXT, b'"'),
             1002),
            ("binary inside a fragmented text", frame(TEXT, b'"a', fin=False) +
             frame(BINARY, b"x"), 1002),
            ("close code 1005", frame(CLOSE, close_payload(1005)), 1002),
            ("close code 1006", frame(CLOSE, close_payload(1006)), 1002),
            ("close code 1015", frame(CLOSE, close_payload(1015)), 1002),
            ("close code 1004", frame(CLOSE, close_payload(1004)), 1002),
            ("close code 1016", frame(CLOSE, close_payload(1016)), 1002),
            ("close code 999", frame(CLOSE, close_payload(999)), 1002),
            ("close code 0", frame(CLOSE, close_payload(0)), 1002),
            ("close code 2999", frame(CLOSE, close_payload(2999)), 1002),
            ("close code 5000", frame(CLOSE, close_payload(5000)), 1002),
            ("close code 65535", frame(CLOSE, close_payload(65535)), 1002),
            ("close payload of 1 byte", frame(CLOSE, b"\x03"), 1002),
            ("invalid UTF-8: 0xff", frame(TEXT, b'"\xff"'), 1007),
            ("invalid UTF-8: a lone continuation byte", frame(TEXT, b'"\x80"'), 1007),
            ("invalid UTF-8: overlong '/'", frame(TEXT, b'"\xc0\xaf"'), 1007),
            ("invalid UTF-8: overlong 3 bytes", frame(TEXT, b'"\xe0\x80\xaf"'), 1007),
            ("invalid UTF-8: a surrogate", frame(TEXT, b'"\xed\xa0\x80"'), 1007),
            ("invalid UTF-8: above U+10FFFF", frame(TEXT, b'"\xf4\x90\x80\x80"'), 1007),
            ("invalid UTF-8: truncated at the end", frame(TEXT, b'"abc\xe2\x82'), 1007),
            ("invalid UTF-8 in the second fragment", frame(TEXT, b'"ok ', fin=False) +
             frame(CONT, b'\xfe"'), 1007),
            ("invalid UTF-8: a sequence cut by the end of the message across fragments",
             frame(TEXT, b'"ok \xe2', fin=False) + frame(CONT, b'\x9c'), 1007),
            ("invalid UTF-8 in a close reason", frame(CLOSE, close_payload(1000, b"\xff\xfe")),
             1007),
            ("a text message of %d bytes" % (MAX_MESSAGE + 1),
             frame(TEXT, b"y" * (MAX_MESSAGE + 1)), 1009),
            ("a binary message of %d bytes" % (MAX_MESSAGE + 1),
             frame(BINARY, b"y" * (MAX_MESSAGE + 1)), 1009),
            ("%d bytes in three fragments" % (MAX_MESSAGE + 1),
             frame(TEXT, b"y" * 2000, fin=False) + frame(CONT, b"y" * 2000, fin=False) +
             frame(CONT, b"y" * (MAX_MESSAGE + 1 - 4000)), 1009),
            ("a header announcing 2^63 + 1 bytes (most significant bit set)",
             frame(TEXT, b"", mask=False, length=1)[:1] + bytes([0x80 | 127]) +
             struct.pack(">Q", (1 << 63) + 1) + b"\0\0\0\0", {1002, 1009}),
        ]
        for name, data, want in closing_cases:
            t0 = time.monotonic()
            ws = RawWS(srv.port, path + "?envelope=index")
            ws.send(data)
            code, before = ws.close_code()
            wants = want if isinstance(want, set) else {want}
            check(code in wants, "%s: closed with %s, wanted %s" % (name, code, sorted(wants)),
                  [m[1][:120] for m in before])
            for m in before:  # full_state only: nothing was appended, nothing answered
                check(m[0] == TEXT and json.loads(m[1]).get("event", {}).get("key") ==
                      "full_state", "%s: a frame before the close other than full_state" % name,
                      m[1][:300])
            ws.send(frame(CLOSE, close_payload(code or 1000)))  # the closing handshake's answer
            ws.expect_eof()
            ws.close()
            good_gets_live(name)
            check(srv.died() is None, "serve died after: %s" % name, srv.died())
            if time.monotonic() - t0 > 5:
                print("slow: %s took %.1f s" % (name, time.monotonic() - t0), flush=True)

        # what must not close: each answered by one ServerErrorEvent (not a
        # Message), then the socket answers a ping
        def still_open(ws, label):
            """Ping; read to its pong. -> the pongs seen on the way."""
            token = os.urandom(8)
            ws.send(frame(PING, token))
            seen, ws.pongs = ws.pongs, []
            while True:
                f = ws.raw_frame()
                check(f is not None, "%s: the connection ended" % label)
                if f[1] == PONG:
                    if f[2] == token:
                        return seen
                    seen.append(f[2])
                    continue
                check(f[1] != CLOSE, "%s: closed with %r" % (label, f[2]))
                check(f[1] == TEXT and "index" in json.loads(f[2]),
                      "%s: an unexpected frame" % label, f)

        open_cases = [
            ("a text message of exactly %d bytes" % MAX_MESSAGE,
             frame(TEXT, b"z" * MAX_MESSAGE), 1),
            ("%d bytes in fragments" % MAX_MESSAGE,
             frame(TEXT, b"z" * 1000, fin=False) + frame(CONT, b"z" * 3000, fin=False) +
             frame(CONT, b"z" * (MAX_MESSAGE - 4000)), 1),
            ("UTF-8 split across fragments", frame(TEXT, b'"split \xe2', fin=False) +
             frame(CONT, b'\x9c', fin=False) + frame(CONT, b'\x93 ok"'), 1),
            ("a 4-byte UTF-8 sequence in four fragments", frame(TEXT, b'"\xf0', fin=False) +
             frame(CONT, b"\x9f", fin=False) + frame(CONT, b"\x8e", fin=False) +
             frame(CONT, b'\x89"'), 1),
            ("pings inside a fragmented message", frame(TEXT, b'"a', fin=False) +
             frame(PING, b"in1") + frame(CONT, b"b", fin=False) + frame(PING, b"in2") +
             frame(PONG, b"unsolicited") + frame(CONT, b'c"'), 1),
            ("empty fragments", frame(TEXT, b"", fin=False) + frame(CONT, b"", fin=False) +
             frame(CONT, b"[]"), 1),
            ("an empty text frame", frame(TEXT, b""), 1),
            ("an empty binary frame", frame(BINARY, b""), 1),
            ("a 125-byte ping", frame(PING, b"q" * 125), 0),
            ("an empty ping", frame(PING, b""), 0),
            ("an unsolicited pong", frame(PONG, b"hello"), 0),
            ("a 125-byte pong", frame(PONG, b"p" * 125), 0),
        ]
        # the pong of the last ping sent must come (RFC 6455 5.5.3: the
        # pong of an earlier one may be skipped)
        last_ping = {"pings inside a fragmented message": b"in2",
                     "a 125-byte ping": b"q" * 125, "an empty ping": b""}
        ws = RawWS(srv.port, path + "?envelope=index")
        f = ws.json()
        check(f["event"].get("key") == "full_state", "full_state", f)
        for name, data, errors in open_cases:
            ws.send(data)
            got, pong = 0, name not in last_ping
            while got < errors or not pong:
                try:
                    f = ws.raw_frame()
                except TestFailure as e:
                    raise TestFailure("%s: wanted %d ServerErrorEvent(s)%s, got %d: %s" % (
                        name, errors, " and a pong" if not pong else "", got, e)) from None
                check(f is not None and f[1] != CLOSE, "%s: closed (%r)" % (name, f))
                if f[1] == PONG:
                    pong = pong or f[2] == last_ping[name]
                    continue
                check(f[1] == TEXT, "%s: an unexpected frame" % name, f)
                j = json.loads(f[2])
                if "index" in j:  # this socket is a subscriber too: the live events
                    continue
                check(set(j) == {"event"} and j["event"].get("kind") == "ServerErrorEvent",
                      "%s: not an enveloped ServerErrorEvent" % name, j)
                got += 1
            still_open(ws, name)  # (and nothing but log events came meanwhile)
            good_gets_live(name)
        # a client close is echoed, with its code
        ws.send(frame(CLOSE, close_payload(1000, b"done")))
        code, before = ws.close_code()
        check(code == 1000, "close 1000 not echoed", code)
        check(all(m[0] == TEXT and "index" in json.loads(m[1]) for m in before),
              "before the echo: not log events", before)
        ws.expect_eof()
        ws.close()
        for sent in [1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999]:
            ws = RawWS(srv.port, path)
            ws.json()  # full_state
            ws.send(frame(CLOSE, close_payload(sent, "bye ✓".encode())))
            code, before = ws.close_code()
            check(code == sent and not before, "close %d not echoed: %s" % (sent, code))
            ws.expect_eof()
            ws.close()
        # an empty close: answered with a close (empty, or 1000)
        ws = RawWS(srv.port, path)
        ws.json()
        ws.send(frame(CLOSE, b""))
        code, before = ws.close_code()
        check(code in (None, 1000) and not before, "an empty close answered with %s" % code)
        ws.expect_eof()
        ws.close()
        good_gets_live("the close echoes")

        # handshakes as other clients make them: each gets full_state, and a
        # pipelined ping (sent with the request) is answered
        edges = [
            ("Connection: keep-alive, Upgrade (Firefox)", {"connection": "keep-alive, Upgrade"}),
            ("Upgrade: WebSocket", {"upgrade": "WebSocket"}),
            ("header names in lower case", {"connection": "upgrade", "upgrade": "websocket"}),
            ("a subprotocol offered", {"headers": ["Sec-WebSocket-Protocol: chat, superchat"]}),
            ("permessage-deflate offered",
             {"headers": ["Sec-WebSocket-Extensions: permessage-deflate; "
                          "client_max_window_bits"]}),
            ("an HTTP request first on the connection",
             {"before": b"GET /alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"}),
        ]
        for name, kw in edges:
            ws = RawWS(srv.port, path + "?envelope=index", after=frame(PING, b"early"), **kw)
            check("sec-websocket-protocol" not in ws.headers,
                  "%s: a subprotocol chosen that the server does not speak" % name, ws.headers)
            check("sec-websocket-extensions" not in ws.headers,
                  "%s: an extension accepted (the frames would be compressed?)" % name,
                  ws.headers)
            got_pong, got_state = False, False
            while not (got_pong and got_state):
                f = ws.raw_frame()
                check(f is not None and f[1] != CLOSE, "%s: closed (%r)" % (name, f))
                if f[1] == PONG:
                    check(f[2] == b"early", "%s: pong %r" % (name, f[2]))
                    got_pong = True
                elif f[1] == TEXT and "index" not in json.loads(f[2]):
                    check(json.loads(f[2])["event"].get("key") == "full_state",
                          "%s: not full_state" % name, f)
                    got_state = True
            ws.send(frame(CLOSE, close_payload(1000)))
            code, _ = ws.close_code()
            check(code == 1000, "%s: close echo %s" % (name, code))
            ws.close()

        # a frame header alone already says what is wrong with the frame: the
        # close must not wait for payload bytes that will never come (pings
        # are off on this server: nothing else wakes the connection)
        header_cases = [
            ("a text header announcing 1 TiB", frame(TEXT, b"", length=1 << 40), 1009),
            ("a text header announcing %d bytes" % (MAX_MESSAGE + 1),
             frame(TEXT, b"", length=MAX_MESSAGE + 1), 1009),
            ("an unmasked header announcing 10 bytes", frame(TEXT, b"", mask=False, length=10),
             1002),
            ("a header with RSV1 announcing 10 bytes", frame(TEXT, b"", rsv=4, length=10), 1002),
            ("a continuation header without a start, 10 bytes", frame(CONT, b"", length=10),
             1002),
        ]
        for name, data, want in header_cases:
            ws = RawWS(srv.port, path)
            ws.json()  # full_state
            ws.send(data)
            try:
                code, before = ws.close_code()
            except TestFailure as e:
                raise TestFailure("%s, wanted close %d: %s" % (name, want, e)) from None
            check(code == want, "%s: closed with %s, wanted %d" % (name, code, want))
            ws.close()
            good_gets_live(name)

        # the good client: the whole log, each event once, in order
        log = api.expect("GET", "/api/conversations/%s/events/search?limit=100" % cid, 200)
        check(log["next_page_id"] is None, "fewer than 100 events", log["next_page_id"])
        items = log["items"]
        check([i for i, _ in good_events] == list(range(len(items))),
              "the good client's indexes are not 0..%d" % (len(items) - 1),
              [i for i, _ in good_events])
        check([e for _, e in good_events] == items, "the good client's events are not the log")
        # no ServerErrorEvent and no bad message made it into the log
        check(all(e["kind"] == "MessageEvent" and e["source"] == "agent" for e in items),
              "something else was appended", [e["kind"] for e in items])
        good.send(frame(CLOSE, close_payload(1000)))
        code, _ = good.close_code()
        check(code == 1000, "the good client's close", code)
        good.close()
        print("ws_malformed_test: ok (%d closing cases, %d open cases, %d live events)" %
              (len(closing_cases), len(open_cases), len(items)))


if __name__ == "__main__":
    main()
