"""ws_interop_test.py - /sockets/events/{id} against Python's websockets
(Debian's python3-websockets, an independent client), over ws:// and wss://
(a certificate made by the test, verified): handshake, auth (first
frame, legacy query and header, wrong key, timeout), 4004, the subscriber
cap, full_state first, replay (all, resend_all, since), resume by after_id,
envelope=index, live events, client messages and bad frames, answers before
the upgrade, and the exactly-once property with 50 clients connecting while
a producer appends.

Run with /usr/bin/python3 (Debian's packages). No sleeps: every wait is a
receive with a deadline.
"""

import asyncio
import http.client
import json
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading

import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Api, Server, check  # noqa: E402

T = 60  # seconds any single receive may take (ASan builds are slow)


def msg(text, source="agent"):
    role = "assistant" if source == "agent" else "user"
    return {"source": source, "kind": "MessageEvent",
            "llm_message": {"role": role, "content": [{"type": "text", "text": text}]}}




def connect(u, **kw):
    """websockets.connect with the test's deadline for the opening handshake
    and the close, and without the library's keepalive pings: their 20 s
    pong timeout and 10 s handshake timeout are not this test's, and a
    loaded machine exceeds them (ws_ping tests the server's pings)."""
    kw.setdefault("ping_interval", None)
    return websockets.connect(u, open_timeout=T, close_timeout=T, **kw)


def url(srv, cid, query=""):
    return "ws://127.0.0.1:%d/sockets/events/%s%s" % (srv.port, cid, query)


async def recv_json(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), T))


async def closed_with(ws, code):
    """Read until the server closes; check its code."""
    try:
        while True:
            await asyncio.wait_for(ws.recv(), T)
    except websockets.ConnectionClosed as e:
        check(e.code == code, "closed with %s %r, wanted %d" % (e.code, e.reason, code))
        return e.reason


async def full_state(ws, envelope=False):
    f = await recv_json(ws)
    if envelope:
        check("index" not in f, "full_state has no index", f)
        f = f["event"]
    check(f.get("kind") == "ConversationStateUpdateEvent" and f.get("key") == "full_state",
          "the first frame is not full_state", f)
    check(isinstance(f["value"].get("execution_status"), str), "no status in full_state", f)
    return f


async def take(ws, n, envelope=True):
    return [await recv_json(ws) for _ in range(n)]


def http_status(port, path, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


async def replay_and_live(srv, api):
    cid = api.conversation()
    first = api.append(cid, [msg("e%d" % i) for i in range(5)])
    log = api.log(cid)
    n0 = len(log)
    # resend_mode=all with envelopes: full_state, the log, then live events
    async with connect(url(srv, cid, "?resend_mode=all&envelope=index")) as ws:
        await full_state(ws, envelope=True)
        got = await take(ws, n0)
        check([f["index"] for f in got] == list(range(n0)), "replay indexes", got)
        check([f["event"] for f in got] == log, "replay is not the log")
        api.append(cid, [msg("live")])
        log = api.log(cid)
        live = await take(ws, len(log) - n0)
        check([f["index"] for f in live] == list(range(n0, len(log))), "live indexes", live)
        check([f["event"] for f in live] == log[n0:], "live events are not the log's")
    # the deprecated resend_all=true, without envelopes
    async with connect(url(srv, cid, "?resend_all=true")) as ws:
        await full_state(ws)
        got = await take(ws, len(log))
        check(got == log, "resend_all is not the log")
    # resume strictly after an event
    after = first[2]["id"]
    k = [e["id"] for e in log].index(after)
    async with connect(url(srv, cid, "?after_id=" + after + "&envelope=index")) as ws:
        await full_state(ws, envelope=True)
        got = await take(ws, len(log) - k - 1)
        check([f["event"]["id"] for f in got] == [e["id"] for e in log[k + 1:]], "after_id", got)
    async with connect(url(srv, cid, "?after_id=nope")) as ws:
        await closed_with(ws, 1008)  # before any frame: nothing can be resumed
    # since: events at or after a time; since without a time: nothing replayed
    ts = log[3]["timestamp"]
    want = [e for e in log if e["timestamp"] >= ts]
    async with connect(url(srv, cid, "?resend_mode=since&after_timestamp=" + ts)) as ws:
        await full_state(ws)
        got = await take(ws, len(want))
        check(got == want, "since", got, want)
    async with connect(url(srv, cid, "?resend_mode=since")) as ws:
        await full_state(ws)
        api.append(cid, [msg("after since")])
        f = await recv_json(ws)
        check(f["llm_message"]["content"][0]["text"] == "after since",
              "since without a time replayed something", f)
    # live only (no replay): the next frame after full_state is the next event
    async with connect(url(srv, cid)) as ws:
        await full_state(ws)
        await ws.ping()  # answered: websockets waits for the pong
        api.append(cid, [msg("only live")])
        f = await recv_json(ws)
        check(f["llm_message"]["content"][0]["text"] == "only live", "live only", f)
    return cid


async def client_frames(srv, api, cid):
    async with connect(url(srv, cid, "?envelope=index")) as ws:
        await full_state(ws, envelope=True)
        n = len(api.log(cid))
        await ws.send(json.dumps({"role": "user",
                                  "content": [{"type": "text", "text": "from the socket"}]}))
        f = await recv_json(ws)
        check(f["index"] == n and f["event"]["source"] == "user"
              and f["event"]["llm_message"]["content"][0]["text"] == "from the socket",
              "the client's message did not come back as the next event", f)
        # the run starts after the append: its status change follows on the socket
        f = await recv_json(ws)
        while f["event"].get("key") != "execution_status" or f["event"]["value"] != "running":
            f = await recv_json(ws)
        st, info = api.call("GET", "/api/conversations/" + cid)
        check(info["execution_status"] == "running", "the message did not start a run", info)
        for bad in ["not json", "[1, 2]", b"\x00\x01"]:
            await ws.send(bad)
            f = await recv_json(ws)
            while "index" in f:  # log events (the run's status changes) go on meanwhile
                f = await recv_json(ws)
            check(f["event"]["kind"] == "ServerErrorEvent", "no ServerErrorEvent for %r" % bad, f)
        await ws.ping()  # still open


async def auth(srv, api, cid):
    # first-frame auth
    async with connect(url(srv, cid)) as ws:
        await ws.send(json.dumps({"type": "auth", "session_api_key": "s3cret"}))
        await full_state(ws)
        await ws.send(json.dumps({"type": "auth", "session_api_key": "s3cret"}))  # ignored
        api.append(cid, [msg("after auth")])
        f = await recv_json(ws)
        check(f.get("kind") == "MessageEvent", "a redundant auth frame was not ignored", f)
    for frame in [{"type": "auth", "session_api_key": "wrong"}, {"role": "user"}, "junk"]:
        async with connect(url(srv, cid)) as ws:
            await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
            await closed_with(ws, 4001)
    # legacy: the key in the query or in the header
    async with connect(url(srv, cid, "?session_api_key=s3cret")) as ws:
        await full_state(ws)
    async with connect(url(srv, cid),
                                  extra_headers={"X-Session-API-Key": "s3cret"}) as ws:
        await full_state(ws)
    try:  # a wrong key in the query: refused before the upgrade, as upstream
        async with connect(url(srv, cid, "?session_api_key=bad")):
            check(False, "a wrong query key was upgraded")
    except websockets.exceptions.InvalidStatusCode as e:
        check(e.status_code == 403, "a wrong query key: 403", e.status_code)
    # authenticated, then: an unknown conversation
    other = "00000000-0000-4000-8000-000000000001"
    async with connect(url(srv, other, "?session_api_key=s3cret")) as ws:
        await closed_with(ws, 4004)


async def auth_timeout(srv):
    """No auth frame in time (the server runs with --ws-auth-timeout 1s):
    nothing is sent, so nothing but the timer can end it. The other auth
    checks run with a timeout as long as a receive's deadline, so that a
    loaded machine cannot make their frame late."""
    cid = Api(srv.port, "s3cret").conversation()
    async with connect(url(srv, cid)) as ws:
        await closed_with(ws, 4001)


async def cap(srv, api):
    cid = api.conversation()
    async with connect(url(srv, cid)) as a, connect(url(srv, cid)) as b:
        await full_state(a)
        await full_state(b)
        async with connect(url(srv, cid)) as c:
            await closed_with(c, 1013)


def before_upgrade(srv, api):
    cid = api.conversation()
    p = "/sockets/events/" + cid
    for q in ["?resend_mode=some", "?after_timestamp=yesterday&resend_mode=since",
              "?after_id=x&resend_mode=all", "?envelope=json", "?resend_all=maybe"]:
        check(http_status(srv.port, p + q, UPGRADE) == 422, "422 for " + q)
    check(http_status(srv.port, "/sockets/events/not-a-uuid", UPGRADE) == 404, "bad id")
    check(http_status(srv.port, "/sockets/other/" + cid, UPGRADE) == 404, "other path")
    check(http_status(srv.port, p, {}) == 400, "a plain GET is not an upgrade")
    h = dict(UPGRADE, **{"Sec-WebSocket-Version": "8"})
    check(http_status(srv.port, p, h) == 426, "version 8")


async def exactly_once(srv, api):
    """A producer appends without pause while 50 clients connect at random
    points of its progress (replay all, after_id, or live only); then a last
    marker event. Each client reads up to the marker: it must have every
    event from its start, once, in log order, as the log has them.

    Past its planned TOTAL events the producer appends one array per client
    that connects, until all have: every client still connects while it
    appends, and the log is at most TOTAL + 5 N events however slow the
    machine is (appending on without pause made the work grow with the
    time the clients took, and a loaded machine slower still)."""
    cid = api.conversation()
    api.append(cid, [msg("seed %d" % i) for i in range(20)])
    rng = random.Random(20261122)
    loop = asyncio.get_running_loop()
    acked, connected, stop = [], [0], [False]
    N, TOTAL = 50, 1500
    news = threading.Condition()  # connected and stop change under it

    def produce():
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=T)
        i = seen = 0
        while not stop[0] or i < TOTAL:
            if i >= TOTAL:
                with news:
                    news.wait_for(lambda: stop[0] or connected[0] > seen, T)
                    seen = connected[0]
            body = json.dumps([msg("p%d" % (i + k)) for k in range(5)])
            c.request("POST", "/api/conversations/%s/events/append" % cid, body=body,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            b = json.loads(r.read())
            check(r.status == 201, "producer append", r.status, b)
            acked.extend(e["id"] for e in b["events"])
            i += 5
        c.close()

    async def until(cond):
        for _ in range(T * 200):
            if cond():
                return
            await asyncio.sleep(0.005)  # polling a condition, with a deadline
        check(False, "a condition was not met in time")

    async def client(threshold, mode):
        await until(lambda: len(acked) >= threshold)
        q, start = "?envelope=index", None
        if mode == "all":
            q, start = q + "&resend_mode=all", 0
        elif mode == "after":
            # off the event loop: a blocking read here would stop the other
            # clients reading their sockets for as long as it takes (on the
            # cluster, seconds for a long log), and the server rightly
            # closes a socket nobody reads for 30 s (1013)
            ev = await loop.run_in_executor(None, api.log, cid)
            j = rng.randrange(len(ev))
            q, start = q + "&after_id=" + ev[j]["id"], j + 1
        got = []
        async with connect(url(srv, cid, q), max_queue=None) as ws:
            await full_state(ws, envelope=True)
            with news:
                connected[0] += 1
                news.notify_all()
            while not got or got[-1]["event"]["id"] != marker[0]:
                got.append(await recv_json(ws))
        return mode, start, got

    marker = [None]
    t0 = loop.time()
    producer = loop.run_in_executor(None, produce)
    plan = [(rng.randrange(TOTAL), rng.choice(["all", "after", "live"])) for _ in range(N)]
    clients = [asyncio.ensure_future(client(t, m)) for t, m in plan]
    try:
        await until(lambda: connected[0] == N)
    finally:  # a failure stops the producer too, or the run would wait for it
        t1 = loop.time()
        with news:
            stop[0] = True
            news.notify_all()
    await producer
    marker[0] = api.append(cid, [msg("marker")])[0]["id"]
    results = await asyncio.gather(*clients)
    log = api.log(cid)
    print("exactly_once: %d clients connected in %.1f s, %d events appended, all read in %.1f s"
          % (N, t1 - t0, len(acked), loop.time() - t0), flush=True)
    end = [e["id"] for e in log].index(marker[0]) + 1  # the stuck detector may add after it
    for mode, start, got in results:
        idx = [f["index"] for f in got]
        first = start if start is not None else idx[0]
        check(idx == list(range(first, end)),
              "%s client: indexes %s..%s are not %d..%d, each once" %
              (mode, idx[:3], idx[-3:], first, end - 1))
        check([f["event"] for f in got] == log[first:end], "%s client: not the log's events" % mode)
    ids = set(e["id"] for e in log)
    check(all(a in ids for a in acked), "an acknowledged event is not in the log")
    check(len(ids) == len(log), "an event is twice in the log")


async def tls():
    """wss:// with a certificate made here, verified against it."""
    tmp = tempfile.mkdtemp(prefix="parley-wss.")
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    p = subprocess.Popen([os.environ["PARLEY"], "serve", "--data", os.path.join(tmp, "data"),
                          "--listen", "127.0.0.1:0", "--log-level", "warn", "--tls-cert", cert,
                          "--tls-key", key, "--api-key", "k"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        m = re.match(r"listening on https://127\.0\.0\.1:(\d+)$", line)
        check(m, "no https announcement", line)
        port = int(m.group(1))
        ctx = ssl.create_default_context(cafile=cert)
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=T)
        c.request("POST", "/api/conversations", body="{}",
                  headers={"X-Session-API-Key": "k", "Content-Type": "application/json"})
        cid = json.loads(c.getresponse().read())["id"]
        async with connect("wss://127.0.0.1:%d/sockets/events/%s" % (port, cid),
                                      ssl=ctx) as ws:
            await ws.send(json.dumps({"type": "auth", "session_api_key": "k"}))
            await full_state(ws)
            big = "z" * 100000  # a message over many TLS records, both ways
            await ws.send(json.dumps({"role": "user", "content": [{"type": "text", "text": big}]}))
            f = await recv_json(ws)
            check(f["llm_message"]["content"][0]["text"] == big, "the message over wss", f)
            await ws.ping()
        c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=T) == 0, "serve did not stop cleanly")
        shutil.rmtree(tmp, ignore_errors=True)


async def main():
    with Server() as srv:
        api = Api(srv.port)
        cid = await replay_and_live(srv, api)
        await client_frames(srv, api, cid)
        before_upgrade(srv, api)
        await exactly_once(srv, api)
    with Server(api_key="s3cret", args=("--ws-auth-timeout", "%ds" % T,
                                        "--ws-max-subscribers", "2")) as srv:
        api = Api(srv.port, "s3cret")
        cid = api.conversation()
        await auth(srv, api, cid)
    with Server(api_key="s3cret", args=("--ws-auth-timeout", "1s")) as srv:
        await auth_timeout(srv)
    with Server(args=("--ws-max-subscribers", "2")) as srv:
        await cap(srv, Api(srv.port))
    await tls()
    print("ws_interop_test: ok")


if __name__ == "__main__":
    asyncio.run(main())
