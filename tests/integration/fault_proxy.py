"""fault_proxy.py - a TCP proxy that injects faults into WebSocket streams,
for the client tests (standard library only).

    proxy = FaultProxy("127.0.0.1", srv.port, seed=7, p_drop=0.05, p_dup=0.05,
                       p_delay=0.05, cut_min=50, cut_max=400, p_cut_http=0.02)
    proxy.start()                 # its own asyncio loop in a thread
    ... connect to 127.0.0.1:proxy.port ...
    proxy.faults(False)           # pass-through from now on (held frames released)
    proxy.retarget(host, port)    # new connections go there (a restarted server)
    proxy.cut_all()               # close every connection now
    proxy.counters()              # {"dropped": .., "duplicated": .., ...}
    proxy.stop()

It listens on 127.0.0.1:0 and forwards every connection to the target.
Client->server bytes pass unchanged. Server->client bytes are read as HTTP
responses (status line and headers, then a body by Content-Length or
chunked, or up to the close); they pass unchanged, except that with
probability p_cut_http a response is cut: a random prefix of it is sent and
both sides are closed. A `101` answer switches the connection to WebSocket
mode: the server's frames (RFC 6455: 2-byte header, 16/64-bit extended
lengths, unmasked, or masked, taken as they come) are parsed, and data
messages (opcode 1/2 with their continuation frames) get the faults:

  drop       with probability p_drop, never sent
  duplicate  with probability p_dup, sent twice in a row
  delay      with probability p_delay, held back and sent after 1..delay_max
             later data messages (a reorder); lost if the link is cut first
  cut        after a random number of data messages in [cut_min, cut_max]
             per connection (cut_max None: never), both sides are closed
             without a close frame

Control frames (close, ping, pong) pass at once. The first `spare_first`
data messages of each WebSocket (e.g. full_state) can be spared.
The RNG is seeded (the seed is printed on stderr when start() runs), so a
failing run's fault pattern can be asked for again with the same seed
(thread timing still varies). faults(False) turns everything off at
runtime and releases held frames, so a test can end on a healthy link.

As a program: python3 fault_proxy.py HOST:PORT [--seed N] [--p-drop P]
[--p-dup P] [--p-delay P] [--cut MIN:MAX] [--p-cut-http P] prints
`listening on 127.0.0.1:PORT`, then the counters every few seconds.
"""

import argparse
import asyncio
import os
import random
import sys
import threading

COUNTERS = ("connections", "ws_connections", "frames", "control_frames",
            "dropped", "duplicated", "delayed", "released", "lost_held",
            "cuts", "http_responses", "http_cuts")


class _Cut(Exception):
    """Close both sides now."""


class FaultProxy:
    def __init__(self, target_host, target_port, seed=None, p_drop=0.0, p_dup=0.0,
                 p_delay=0.0, delay_max=3, cut_min=None, cut_max=None, p_cut_http=0.0,
                 spare_first=0, quiet=False):
        self.target = (target_host, target_port)
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
        self.rng = random.Random(self.seed)
        self.p_drop, self.p_dup, self.p_delay = p_drop, p_dup, p_delay
        self.delay_max = max(1, delay_max)
        if cut_max is not None and cut_min is None:
            cut_min = 1
        self.cut_min, self.cut_max = cut_min, cut_max
        self.p_cut_http = p_cut_http
        self.spare_first = spare_first
        self.quiet = quiet
        self.on = True
        self.port = None
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._conns = set()          # the _Conn objects alive (loop thread only)
        self._loop = None
        self._thread = None
        self._server = None
        self._ready = threading.Event()
        self._error = None

    # ------------------------------------------------ from the test's thread
    def start(self, timeout=30):
        """Start the loop thread; -> the port listened on."""
        if not self.quiet:
            print("fault_proxy: seed %d" % self.seed, file=sys.stderr, flush=True)
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("fault proxy did not start within %d s" % timeout)
        if self._error is not None:
            raise self._error
        return self.port

    def faults(self, on):
        """Switch all faults on or off; off also releases the frames held back."""
        done = threading.Event()

        def apply():
            self.on = on
            if not on:
                for c in list(self._conns):
                    c.release_all()
            done.set()
        self._loop.call_soon_threadsafe(apply)
        if not done.wait(30):
            raise RuntimeError("fault proxy loop does not answer")

    def retarget(self, host, port):
        """Forward new connections to host:port from now on (a restarted server)."""
        self.target = (host, port)

    def cut_all(self):
        """Close every proxied connection now, both sides (counted as cuts)."""
        done = threading.Event()

        def apply():
            for c in list(self._conns):
                if not c.closed:
                    self._count("cuts")
                c.abort()
            done.set()
        self._loop.call_soon_threadsafe(apply)
        if not done.wait(30):
            raise RuntimeError("fault proxy loop does not answer")

    def live_websockets(self):
        """How many proxied WebSocket connections are open now."""
        return sum(1 for c in list(self._conns) if c.ws and not c.closed)

    def counters(self):
        with self._lock:
            return dict(self._counts)

    def stop(self, timeout=30):
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            fut.result(timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._loop = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------ the loop thread
    def _count(self, name, n=1):
        with self._lock:
            self._counts[name] += n

    def _run(self):
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
        except Exception as e:  # noqa: BLE001 - handed to start()
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _shutdown(self):
        self._server.close()
        for c in list(self._conns):
            c.abort()
        await self._server.wait_closed()

    async def _accept(self, creader, cwriter):
        self._count("connections")
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
        except OSError:
            cwriter.transport.abort()
            return
        conn = _Conn(self, creader, cwriter, sreader, swriter)
        self._conns.add(conn)
        try:
            await conn.run()
        finally:
            self._conns.discard(conn)


class _Conn:
    """One proxied connection: client->server copied, server->client parsed."""

    def __init__(self, proxy, creader, cwriter, sreader, swriter):
        self.p = proxy
        self.creader, self.cwriter = creader, cwriter
        self.sreader, self.swriter = sreader, swriter
        self.held = []          # [remaining data messages to wait, bytes]
        self.closed = False
        self.ws = False

    def abort(self):
        if not self.closed:
            self.closed = True
            self.cwriter.transport.abort()
            self.swriter.transport.abort()

    def release_all(self):
        """Send every held message now (faults switched off)."""
        if self.closed:
            return
        for _, data in self.held:
            self.cwriter.write(data)
            self.p._count("released")
        self.held = []

    async def run(self):
        up = asyncio.ensure_future(self._upstream())
        try:
            await self._downstream()
        except (_Cut, ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            if self.held:
                self.p._count("lost_held", len(self.held))
                self.held = []
            if not self.closed:
                # the server closed: the client sees the close after the bytes
                self.closed = True
                try:
                    await asyncio.wait_for(self.cwriter.drain(), 30)
                except (ConnectionError, OSError, asyncio.TimeoutError):
                    pass
                self.cwriter.close()
                self.swriter.close()
            up.cancel()
            try:
                await up
            except (asyncio.CancelledError, ConnectionError, OSError):
                pass

    async def _upstream(self):
        """Client -> server, unchanged; the client's EOF goes on as EOF."""
        try:
            while True:
                data = await self.creader.read(65536)
                if not data:
                    if not self.closed and self.swriter.can_write_eof():
                        self.swriter.write_eof()
                    return
                if self.closed:
                    return
                self.swriter.write(data)
                await self.swriter.drain()
        except (ConnectionError, OSError):
            self.abort()

    async def _send(self, data):
        if self.closed:
            raise _Cut()
        self.cwriter.write(data)
        await self.cwriter.drain()

    # ---------------------------------------------- HTTP responses
    async def _downstream(self):
        r = self.sreader
        while True:
            try:
                head = await r.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    await self._send(e.partial)
                return
            except asyncio.LimitOverrunError:
                # not HTTP as we know it: copy the rest unchanged
                await self._copy_rest()
                return
            status, headers = _parse_head(head)
            if status == 101:
                await self._send(head)
                self.ws = True
                self.p._count("ws_connections")
                await self._websocket()
                return
            body, to_close = await self._body(status, headers)
            self.p._count("http_responses")
            data = head + body
            if 100 <= status < 200:
                await self._send(data)
                continue
            if self.p.on and self.p.p_cut_http > 0 and self.p.rng.random() < self.p.p_cut_http:
                cut = self.p.rng.randrange(1, len(data)) if len(data) > 1 else 0
                self.p._count("http_cuts")
                self.cwriter.write(data[:cut])
                try:
                    await asyncio.wait_for(self.cwriter.drain(), 5)
                except (ConnectionError, OSError, asyncio.TimeoutError):
                    pass
                self.abort()
                raise _Cut()
            await self._send(data)
            if to_close:
                await self._copy_rest()
                return

    async def _body(self, status, headers):
        """-> (raw body bytes, read up to the close?)"""
        r = self.sreader
        if 100 <= status < 200 or status in (204, 304):
            return b"", False
        te = headers.get("transfer-encoding", "").lower()
        if "chunked" in te:
            out = bytearray()
            while True:
                line = await r.readuntil(b"\r\n")
                out += line
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers, up to the empty line
                        t = await r.readuntil(b"\r\n")
                        out += t
                        if t == b"\r\n":
                            return bytes(out), False
                out += await r.readexactly(size + 2)
        if "content-length" in headers:
            n = int(headers["content-length"])
            return (await r.readexactly(n)) if n else b"", False
        return (await r.read()), True  # up to the close

    async def _copy_rest(self):
        while True:
            data = await self.sreader.read(65536)
            if not data:
                return
            await self._send(data)

    # ---------------------------------------------- WebSocket frames
    async def _frame(self):
        """-> (fin, opcode, raw frame bytes), or None at EOF."""
        r = self.sreader
        try:
            h = await r.readexactly(2)
        except asyncio.IncompleteReadError:
            return None
        fin, opcode = h[0] & 0x80, h[0] & 0x0F
        masked, n = h[1] & 0x80, h[1] & 0x7F
        raw = bytearray(h)
        if n == 126:
            ext = await r.readexactly(2)
            raw += ext
            n = int.from_bytes(ext, "big")
        elif n == 127:
            ext = await r.readexactly(8)
            raw += ext
            n = int.from_bytes(ext, "big")
        if masked:
            raw += await r.readexactly(4)
        if n:
            raw += await r.readexactly(n)
        return bool(fin), opcode, bytes(raw)

    async def _websocket(self):
        p = self.p
        budget = None
        if p.cut_max is not None:
            budget = p.rng.randint(p.cut_min, p.cut_max)
        seen = 0        # data messages seen on this connection
        message = None  # the data message being assembled (fragments)
        while True:
            f = await self._frame()
            if f is None:
                return
            fin, opcode, raw = f
            if opcode >= 8:     # control frames pass at once, even between fragments
                p._count("control_frames")
                await self._send(raw)
                continue
            message = raw if message is None else message + raw
            if not fin:
                continue
            data, message = message, None
            seen += 1
            p._count("frames")
            # frames held back go out once enough later messages went by
            ready = []
            for h in self.held:
                h[0] -= 1
            while self.held and self.held[0][0] <= 0:
                ready.append(self.held.pop(0)[1])
            if not p.on or seen <= p.spare_first:
                out = [data]
            else:
                if budget is not None and seen > budget:
                    p._count("cuts")
                    self.abort()
                    raise _Cut()
                x = p.rng.random()
                if x < p.p_drop:
                    p._count("dropped")
                    out = []
                elif x < p.p_drop + p.p_dup:
                    p._count("duplicated")
                    out = [data, data]
                elif x < p.p_drop + p.p_dup + p.p_delay:
                    p._count("delayed")
                    self.held.append([p.rng.randint(1, p.delay_max), data])
                    out = []
                else:
                    out = [data]
            if self.closed:
                raise _Cut()
            for d in out + ready:
                self.cwriter.write(d)
            if ready:
                p._count("released", len(ready))
            await self.cwriter.drain()


def _parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    try:
        status = int(parts[1])
    except (IndexError, ValueError):
        status = 0
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


def main():
    ap = argparse.ArgumentParser(description="a fault-injecting WebSocket proxy")
    ap.add_argument("target", help="HOST:PORT")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--p-drop", type=float, default=0.0)
    ap.add_argument("--p-dup", type=float, default=0.0)
    ap.add_argument("--p-delay", type=float, default=0.0)
    ap.add_argument("--cut", help="MIN:MAX data messages per WebSocket before a cut")
    ap.add_argument("--p-cut-http", type=float, default=0.0)
    ap.add_argument("--spare-first", type=int, default=0)
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    cmin = cmax = None
    if a.cut:
        cmin, cmax = (int(x) for x in a.cut.split(":"))
    proxy = FaultProxy(host, int(port), seed=a.seed, p_drop=a.p_drop, p_dup=a.p_dup,
                       p_delay=a.p_delay, cut_min=cmin, cut_max=cmax,
                       p_cut_http=a.p_cut_http, spare_first=a.spare_first)
    print("listening on 127.0.0.1:%d" % proxy.start(), flush=True)
    stop = threading.Event()
    try:
        while not stop.wait(5):
            print(proxy.counters(), flush=True)
    except KeyboardInterrupt:
        pass
    proxy.stop()


if __name__ == "__main__":
    main()
