"""ws_raw.py - a WebSocket client over a raw socket, for tests that must send
what no library would (unmasked frames, reserved bits, bad UTF-8) or behave
as no library would (never answer pings, never read). Standard library only.
"""

import base64
import os
import socket
import struct

from parley_client import check

DEADLINE = 60  # seconds for anything that should take a second


def handshake(port, path, rcvbuf=None):
    """Connect and upgrade; -> (socket, bytes read past the 101)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(DEADLINE)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, key)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        got = s.recv(4096)
        check(got, "the server closed during the handshake")
        buf += got
    head, rest = buf.split(b"\r\n\r\n", 1)
    check(head.startswith(b"HTTP/1.1 101"), "no 101", head)
    return s, rest


def frame(opcode, payload, fin=True, mask=True, rsv=0):
    """One client frame (masked unless told otherwise)."""
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    n = len(payload)
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


class Reader:
    """Server frames from a raw socket."""

    def __init__(self, sock, rest=b""):
        self.s, self.buf = sock, rest

    def next(self):
        """(opcode, payload), or None once the server closed the socket."""
        while True:
            if len(self.buf) >= 2:
                n = self.buf[1] & 0x7f
                at = 2
                if n == 126 and len(self.buf) >= 4:
                    n, at = struct.unpack(">H", self.buf[2:4])[0], 4
                elif n == 127 and len(self.buf) >= 10:
                    n, at = struct.unpack(">Q", self.buf[2:10])[0], 10
                if n < 126 or at > 2:
                    if len(self.buf) >= at + n:
                        op, payload = self.buf[0] & 0x0f, self.buf[at:at + n]
                        self.buf = self.buf[at + n:]
                        return op, payload
            try:
                got = self.s.recv(65536)
            except ConnectionResetError:
                return None
            if not got:
                return None
            self.buf += got

    def close_code(self):
        """Read up to the server's close frame: its code (None: no close frame)."""
        while True:
            f = self.next()
            if f is None:
                return None
            if f[0] == 0x8:
                return struct.unpack(">H", f[1][:2])[0] if len(f[1]) >= 2 else 1005
