"""ws_python_test.py - /sockets/events/{id} against Python's `websockets`
(Debian python3-websockets 10.4, an independent client), checked against the
protocol contract (issue #6):

  handshake (dashed, 32-hex and upper-case ids); full_state first and its
  shape; live events to several sockets; replay: resend_mode=all,
  resend_all=true/false, resend_mode=since with naive and zone-aware
  after_timestamp (the server runs at UTC+05:30), since without a time;
  resume with after_id (strictly after; unknown -> 1008); envelope=index
  (dense indexes, non-log frames without one); answers before the upgrade
  (422, 404, 400, 426 with {"detail"}); 4004; a client Message appended as
  a user MessageEvent (REST search, back on every socket) and bad frames
  answered with one ServerErrorEvent to that socket only; pings and close
  echo; auth with --api-key (first frame, wrong key, bad first frames, the
  --ws-auth-timeout, query and header keys, redundant auth frames ignored,
  auth before 4004); 1013 over --ws-max-subscribers; wss:// with a
  certificate made here.

Run with /usr/bin/python3 (Debian's websockets). No sleeps: every wait is a
receive or a polled condition with a deadline.
"""

import asyncio
import datetime
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

import websockets
import websockets.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Api, Server, check  # noqa: E402

T = 60                # seconds any single wait may take (ASan builds are slow)
KEY = "py-ws-k3y"
# no stuck detector: it would append its own events (a monologue of agent
# messages is "stuck") between the test's markers
NO_STUCK = {"stuck_detection": False}
TZ = "PLY-5:30"       # POSIX TZ: the server's local time is UTC+05:30
UTC_OFFSET = datetime.timedelta(hours=5, minutes=30)
STATUSES = {"idle", "running", "paused", "waiting_for_confirmation", "finished", "error",
            "stuck", "deleting"}


def msg(text):
    return {"source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def text_of(ev):
    try:
        return ev["llm_message"]["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None




def no_nulls(v, where="frame"):
    if isinstance(v, dict):
        for k, x in v.items():
            check(x is not None, "%s has a null at %r (nulls are omitted)" % (where, k), v)
            no_nulls(x, where)
    elif isinstance(v, list):
        for x in v:
            no_nulls(x, where)


async def connect(url, **kw):
    kw.setdefault("ping_interval", None)  # no library pings unless a test sends one
    return await websockets.connect(url, open_timeout=T, close_timeout=T, max_size=None,
                                    max_queue=None, **kw)


async def frame(ws, what="a frame"):
    """The next server frame: text, one JSON object."""
    try:
        raw = await asyncio.wait_for(ws.recv(), T)
    except asyncio.TimeoutError:
        check(False, "no frame within %d s while waiting for %s" % (T, what))
    except websockets.exceptions.ConnectionClosed as e:
        check(False, "closed (%s) while waiting for %s" % (e.rcvd, what))
    check(isinstance(raw, str), "a server frame is binary, not text", raw[:200])
    f = json.loads(raw)
    check(isinstance(f, dict), "a server frame is not a JSON object", raw[:300])
    return f


async def refused(u, status, **kw):
    """The upgrade is answered with this HTTP status, not a WebSocket."""
    try:
        ws = await connect(u, **kw)
    except websockets.exceptions.InvalidStatusCode as e:
        check(e.status_code == status, "the upgrade was refused %d, wanted %d" % (e.status_code,
                                                                                   status), u)
        return
    await ws.close()
    check(False, "the upgrade was accepted, wanted %d" % status, u)


async def closed(ws, code, reason=None, frames_ok=False):
    """Read until the server's close frame; check its code (and reason).
    frames_ok=False: no frame may come before it. -> the frames read."""
    got = []
    while True:
        try:
            raw = await asyncio.wait_for(ws.recv(), T)
        except asyncio.TimeoutError:
            check(False, "not closed within %d s, wanted %d" % (T, code), got)
        except websockets.exceptions.ConnectionClosed as e:
            check(e.rcvd is not None, "the server dropped the connection without a close "
                  "frame, wanted %d" % code, got)
            check(e.rcvd.code == code, "closed with %d %r, wanted %d" %
                  (e.rcvd.code, e.rcvd.reason, code), got)
            if reason is not None:  # the contract's text, perhaps with a detail after it
                check(e.rcvd.reason == reason or e.rcvd.reason.startswith(reason + ": "),
                      "close %d reason %r, wanted %r" % (code, e.rcvd.reason, reason))
            return got
        check(frames_ok, "a frame before the close %d" % code, raw[:300])
        got.append(json.loads(raw))


def same_id(a, b):
    return uuid.UUID(a) == uuid.UUID(b)


def check_full_state(f, cid, envelope=False):
    if envelope:
        check(set(f) == {"event"}, "an enveloped full_state is {\"event\": ...} with no index", f)
        f = f["event"]
    check(f.get("kind") == "ConversationStateUpdateEvent" and f.get("key") == "full_state",
          "the first frame is not the full_state ConversationStateUpdateEvent", f)
    check(isinstance(f.get("id"), str) and f["id"], "full_state has no id", f)
    check(f.get("source") == "environment", "full_state source", f)
    ts = f.get("timestamp")
    check(isinstance(ts, str), "full_state has no timestamp", f)
    check(datetime.datetime.fromisoformat(ts).tzinfo is None, "full_state timestamp is not naive",
          ts)
    v = f.get("value")
    check(isinstance(v, dict), "full_state value is not an object", f)
    check(isinstance(v.get("id"), str) and same_id(v["id"], cid) and v["id"] == str(uuid.UUID(cid)),
          "full_state value.id is not the conversation's (dashed)", v.get("id"), cid)
    check(v.get("execution_status") in STATUSES, "full_state execution_status", v)
    no_nulls(f, "full_state")
    return f


async def first_full_state(ws, cid, envelope=False):
    return check_full_state(await frame(ws, "full_state"), cid, envelope)


async def events(ws, n, envelope=False, first_index=None):
    """n log-event frames -> the events (envelopes checked and removed)."""
    out = []
    for i in range(n):
        f = await frame(ws, "event %d of %d" % (i + 1, n))
        if envelope:
            check(set(f) == {"index", "event"}, "a log event frame is not {index, event}", f)
            if first_index is not None:
                check(f["index"] == first_index + i, "index %r, wanted %d (dense)" %
                      (f["index"], first_index + i), f)
            f = f["event"]
        check("kind" in f and "id" in f, "a log event has no kind/id", f)
        out.append(f)
    return out


async def next_is(ws, api, cid, text, envelope=False, index=None):
    """Append a marker over REST; the socket's next frame must be it."""
    ack = api.append(cid, [msg(text)])
    f = await frame(ws, "the marker %r" % text)
    if envelope:
        check(set(f) == {"index", "event"}, "the marker frame is not {index, event}", f)
        check(f["index"] == ack[0]["index"], "marker index %r, wanted %d" %
              (f["index"], ack[0]["index"]), f)
        f = f["event"]
    check(f.get("id") == ack[0]["id"] and text_of(f) == text,
          "the next frame is not the marker %r (nothing else may come first)" % text, f)
    return ack[0]


def url(port, cid, query="", scheme="ws"):
    return "%s://127.0.0.1:%d/sockets/events/%s%s" % (scheme, port, cid, query)


def q(**params):
    return "?" + urllib.parse.urlencode(params)


# --- the tests, on a server without a key ----------------------------------------------------

async def t_handshake(srv, api):
    cid = api.conversation()
    for form in [cid, uuid.UUID(cid).hex, cid.upper()]:
        ws = await connect(url(srv.port, form))
        check(ws.response_headers.get("Upgrade", "").lower() == "websocket", "Upgrade header",
              dict(ws.response_headers))
        await first_full_state(ws, cid)
        await next_is(ws, api, cid, "after %s" % form)
        await ws.close()
    # a new conversation says idle
    cid = api.conversation()
    ws = await connect(url(srv.port, cid))
    f = await first_full_state(ws, cid)
    check(f["value"]["execution_status"] == "idle", "a new conversation is idle", f)
    await ws.close()


async def t_live(srv, api):
    cid = api.conversation()
    a = await connect(url(srv.port, cid))
    b = await connect(url(srv.port, cid, "?envelope=index"))
    await first_full_state(a, cid)
    await first_full_state(b, cid, envelope=True)
    acks = api.append(cid, [msg("live %d" % i) for i in range(3)])
    acks += api.append(cid, msg("live 3"))
    acks += api.append(cid, [msg("live 4")])
    check([x["index"] for x in acks] == list(range(5)), "append indexes", acks)
    log = api.log(cid)
    check([e["id"] for e in log] == [x["id"] for x in acks], "the log is the appends", log)
    got_a = await events(a, 5)
    got_b = await events(b, 5, envelope=True, first_index=0)
    check(got_a == log, "live events (plain) are not the REST search items", got_a, log)
    check(got_b == log, "live events (envelope) are not the REST search items", got_b, log)
    for ws in (a, b):
        await ws.close()


async def t_replay_all(srv, api):
    cid = api.conversation()
    for i in range(3):
        api.append(cid, [msg("r%d.%d" % (i, j)) for j in range(i + 1)])
    log = api.log(cid)
    check(len(log) == 6, "six events", log)
    for query, envelope in [("?resend_mode=all", False), ("?resend_mode=all&envelope=index", True),
                            ("?resend_all=true", False), ("?resend_all=true&envelope=index", True),
                            ("?envelope=index&resend_mode=all&resend_all=true", True)]:
        ws = await connect(url(srv.port, cid, query))
        await first_full_state(ws, cid, envelope)
        got = await events(ws, len(log), envelope, first_index=0)
        check(got == log, "%s: the replay is not the log" % query, got, log)
        # hands over to live delivery: the next frame is the next event
        ack = await next_is(ws, api, cid, "after replay " + query, envelope, len(log))
        log = api.log(cid)
        check(log[-1]["id"] == ack["id"], "the marker is last in the log")
        await ws.close()
    # resend_all=false: no replay
    ws = await connect(url(srv.port, cid, "?resend_all=false"))
    await first_full_state(ws, cid)
    await next_is(ws, api, cid, "resend_all=false replays nothing")
    await ws.close()
    # no query at all: no replay
    ws = await connect(url(srv.port, cid, "?envelope=index"))
    await first_full_state(ws, cid, True)
    await next_is(ws, api, cid, "no replay by default", True, len(api.log(cid)))
    await ws.close()


def ts_of(e):
    return datetime.datetime.fromisoformat(e["timestamp"])


async def t_replay_since(srv, api):
    cid = api.conversation()
    for i in range(5):  # separate requests: distinct timestamps
        api.append(cid, [msg("s%d" % i), msg("s%d'" % i)])
    log = api.log(cid)
    check(len(log) == 10, "ten events", log)
    # the server's local time is UTC+05:30 (TZ): its naive timestamps say so
    now_local = datetime.datetime.utcnow() + UTC_OFFSET
    skew = abs((ts_of(log[-1]) - now_local).total_seconds())
    check(skew < 600, "event timestamps are not the server's local time (TZ=%s): %s vs %s" %
          (TZ, log[-1]["timestamp"], now_local.isoformat()))

    async def since(ts_param, cut, envelope=False, label=None):
        want = [e for e in log if ts_of(e) >= cut]
        query = q(resend_mode="since", after_timestamp=ts_param)
        if envelope:
            query += "&envelope=index"
        ws = await connect(url(srv.port, cid, query))
        await first_full_state(ws, cid, envelope)
        first = len(log) - len(want)
        got = await events(ws, len(want), envelope, first_index=first)
        check(got == want, "since %s (%s): wanted events %d.. of the log" %
              (ts_param, label, first), [e["id"] for e in got], [e["id"] for e in want])
        await next_is(ws, api, cid, "after since %s" % ts_param, envelope,
                      len(log) if envelope else None)
        await ws.close()
        log.append(api.log(cid)[-1])  # the marker is in the log now

    for k in [0, 3, 4, 9]:
        naive = log[k]["timestamp"]
        cut = ts_of(log[k])
        await since(naive, cut, label="naive, event %d's time" % k)
        await since(naive, cut, envelope=True, label="naive, enveloped")
        utc = cut - UTC_OFFSET
        await since(utc.isoformat() + "Z", cut, label="UTC with Z")
        await since(utc.isoformat() + "+00:00", cut, label="UTC with +00:00")
        west = utc - datetime.timedelta(hours=3)
        await since(west.isoformat() + "-03:00", cut, label="-03:00")
        east = utc + datetime.timedelta(hours=9)
        await since(east.isoformat() + "+09:00", cut, label="+09:00")
    # a time before everything: all; after everything: nothing
    await since("2000-01-01T00:00:00", datetime.datetime(2000, 1, 1), label="the past")
    await since("2999-01-01T00:00:00", datetime.datetime(2999, 1, 1), label="the future")
    await since("2999-01-01T00:00:00+00:00", datetime.datetime(2999, 1, 1), label="future, aware")
    # since without after_timestamp: nothing
    for query in ["?resend_mode=since", "?resend_mode=since&envelope=index"]:
        ws = await connect(url(srv.port, cid, query))
        env = "envelope" in query
        await first_full_state(ws, cid, env)
        await next_is(ws, api, cid, "since without a time " + query, env, len(api.log(cid)))
        await ws.close()


async def t_after_id(srv, api):
    cid = api.conversation()
    acks = []
    for i in range(4):
        acks += api.append(cid, [msg("a%d.%d" % (i, j)) for j in range(3)])
    log = api.log(cid)
    check(len(log) == 12, "twelve events", log)
    for k in [0, 1, 5, 10, 11]:
        for envelope in (False, True):
            query = q(after_id=log[k]["id"]) + ("&envelope=index" if envelope else "")
            ws = await connect(url(srv.port, cid, query))
            await first_full_state(ws, cid, envelope)
            got = await events(ws, len(log) - k - 1, envelope, first_index=k + 1)
            check(got == log[k + 1:], "after_id of event %d: not the events strictly after it" % k,
                  [e["id"] for e in got])
            await next_is(ws, api, cid, "after after_id %d %s" % (k, envelope), envelope, len(log))
            log = api.log(cid)
            await ws.close()
    # an id that is not in this log: close 1008
    other = api.conversation()
    foreign = api.append(other, [msg("elsewhere")])[0]["id"]
    for bad in [str(uuid.uuid4()), foreign, "nope"]:
        ws = await connect(url(srv.port, cid, q(after_id=bad)))
        got = await closed(ws, 1008, frames_ok=True)
        check(not any("index" in f or f.get("kind") == "MessageEvent" for f in got),
              "events sent before the 1008 for after_id=%s" % bad, got)


async def t_before_upgrade(srv, api):
    cid = api.conversation()
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Host": "127.0.0.1"}

    def get(path, headers):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=T)
        c.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers.items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        raw = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, raw

    def expect(path, headers, status):
        st, hdrs, raw = get(path, headers)
        check(st == status, "GET %s: %d, wanted %d" % (path, st, status), raw[:300])
        body = json.loads(raw)
        check(isinstance(body, dict) and isinstance(body.get("detail"), str) and body["detail"],
              "GET %s: the body is not {\"detail\": \"...\"}" % path, raw[:300])
        return hdrs

    base = "/sockets/events/" + cid
    for query in ["?resend_mode=bogus", "?resend_mode=", "?resend_mode=ALL",
                  "?resend_mode=since&after_timestamp=yesterday",
                  "?resend_mode=since&after_timestamp=2026-13-01T00:00:00",
                  "?resend_mode=since&after_timestamp=",
                  "?after_id=" + cid + "&resend_mode=all",
                  "?after_id=" + cid + "&resend_mode=since",
                  "?after_id=" + cid + "&resend_all=true",
                  "?envelope=json", "?envelope=", "?after_id=",
                  "?after_id=&envelope=index"]:
        expect(base + query, upgrade, 422)
    for path in ["/sockets/events/not-a-uuid", "/sockets/events/" + cid[:-1],
                 "/sockets/events/" + cid + "0", "/sockets/events/",
                 "/sockets/events/" + cid + "/more", "/sockets/other/" + cid,
                 "/sockets/bash-events", "/sockets/"]:
        expect(path, upgrade, 404)
    plain = {"Host": "127.0.0.1"}
    expect(base, plain, 400)
    for drop in ["Upgrade", "Connection", "Sec-WebSocket-Key"]:
        h = {k: v for k, v in upgrade.items() if k != drop}
        expect(base, h, 400)
    expect(base, dict(upgrade, **{"Sec-WebSocket-Key": "short"}), 400)
    hdrs = expect(base, dict(upgrade, **{"Sec-WebSocket-Version": "8"}), 426)
    check(hdrs.get("sec-websocket-version") == "13", "426 without Sec-WebSocket-Version: 13", hdrs)
    # still serving, and the good upgrade works
    ws = await connect(url(srv.port, cid))
    await first_full_state(ws, cid)
    await ws.close()


async def t_unknown_conversation(srv, api):
    for cid in [str(uuid.uuid4()), uuid.uuid4().hex]:
        ws = await connect(url(srv.port, cid, "?resend_mode=all&envelope=index"))
        await closed(ws, 4004, "Conversation not found")


async def t_client_frames(srv, api):
    cid = api.conversation()
    a = await connect(url(srv.port, cid, "?envelope=index"))
    b = await connect(url(srv.port, cid, "?envelope=index"))
    await first_full_state(a, cid, True)
    await first_full_state(b, cid, True)
    bad_frames = ["not json", "{", "[1, 2]", "\"a string\"", "42", "null", "true",
                  json.dumps({"role": "user", "content": 7}),
                  json.dumps({"role": "user", "content": {"type": "text"}}),
                  b"\x00\x01binary", json.dumps({"type": "auth"}).encode()]
    for bad in bad_frames:
        await a.send(bad)
        f = await frame(a, "the ServerErrorEvent for %r" % (bad,))
        check(set(f) == {"event"}, "a ServerErrorEvent frame has no index: {\"event\": ...}",
              bad, f)
        e = f["event"]
        check(e.get("kind") == "ServerErrorEvent", "no ServerErrorEvent for %r" % (bad,), f)
        check(e.get("source") == "environment", "ServerErrorEvent source", e)
        for k in ["id", "timestamp", "code", "detail"]:
            check(isinstance(e.get(k), str) and e[k], "ServerErrorEvent without %s" % k, e)
    # an auth frame on a server without a key: ignored (no answer at all)
    await a.send(json.dumps({"type": "auth", "session_api_key": "anything"}))
    pong = await a.ping(b"still open")
    await asyncio.wait_for(pong, T)
    # nothing was appended, and b saw none of a's errors: both see the marker next, index 0
    ack = api.append(cid, [msg("marker 0")])
    check(ack[0]["index"] == 0, "bad frames were appended to the log", ack)
    for ws in (a, b):
        got = await events(ws, 1, True, first_index=0)
        check(got[0]["id"] == ack[0]["id"], "the marker", got)
    check(len(api.log(cid)) == 1, "the log has more than the marker", api.log(cid))

    # a Message: appended as a user MessageEvent, back on both sockets, in REST search
    await a.send(json.dumps({"role": "user", "content": [{"type": "text", "text": "from a"}]}))
    for name, ws in (("sender", a), ("other", b)):
        f = await frame(ws, "the user message on the %s socket" % name)
        check(f.get("index") == 1, "the user message is not the next log event (%s)" % name, f)
        e = f["event"]
        check(e.get("kind") == "MessageEvent" and e.get("source") == "user" and
              e.get("llm_message", {}).get("role") == "user" and text_of(e) == "from a",
              "not a user MessageEvent with the text (%s)" % name, e)
    log = api.log(cid)
    check(len(log) >= 2 and log[1] == e, "REST search has not the same user MessageEvent", log, e)
    st, found = api.call("GET", "/api/conversations/%s/events/search?source=user&body=from%%20a"
                         % cid)
    check(st == 200 and [x["id"] for x in found["items"]] == [e["id"]],
          "search by source and body", found)
    # the run started: a status change to running reaches the sockets (log events)
    for ws in (a, b):
        while True:
            f = await frame(ws, "execution_status running")
            check("index" in f, "a non-log frame during the run", f)
            ev = f["event"]
            if ev.get("kind") == "ConversationStateUpdateEvent" and \
                    ev.get("key") == "execution_status" and ev.get("value") == "running":
                break
    # a new subscriber's full_state says so too, as REST does
    st, info = api.call("GET", "/api/conversations/" + cid)
    check(st == 200 and info["execution_status"] == "running", "REST: not running", info)
    c = await connect(url(srv.port, cid))
    f = await first_full_state(c, cid)
    check(f["value"]["execution_status"] == "running", "full_state during the run", f)
    for ws in (a, b, c):
        await ws.close()

    # role left out: a user message too (a fresh conversation, no run going on)
    cid = api.conversation()
    c = await connect(url(srv.port, cid))
    await first_full_state(c, cid)
    await c.send(json.dumps({"content": [{"type": "text", "text": "no role"}]}))
    f = await frame(c, "the role-less message")
    check(f.get("kind") == "MessageEvent" and f.get("source") == "user" and
          f["llm_message"].get("role") == "user" and text_of(f) == "no role",
          "a Message without role is not a user MessageEvent", f)
    check(api.log(cid)[0] == f, "REST has not the same event", api.log(cid))
    # as upstream reads a socket's message: a string is one text part, and
    # no content is none
    async def next_message(what):
        while True:  # status changes of the runs these messages start come too
            f = await frame(c, what)
            if f.get("kind") == "MessageEvent":
                return f

    await c.send(json.dumps({"role": "user", "content": "a plain string"}))
    f = await next_message("the string message")
    check(f["llm_message"].get("content") == [{"type": "text", "text": "a plain string"}],
          "a string is not one text part", f)
    await c.send(json.dumps({"role": "user"}))
    f = await next_message("the message without content")
    check(f["llm_message"].get("content") in ([], None), "no content is not none", f)
    await c.close()


async def t_big_replay(srv, api):
    """A replay over many search pages and several times the 1 MiB socket
    queue: every event once, in order, then live delivery goes on."""
    cid = api.conversation()
    pad = "x" * 6000
    for b in range(13):
        api.append(cid, [msg("big %d.%d %s" % (b, i, pad)) for i in range(20)])
    log = api.log(cid)
    check(len(log) == 260, "260 events", len(log))
    ws = await connect(url(srv.port, cid, "?resend_mode=all&envelope=index"))
    await first_full_state(ws, cid, True)
    got = await events(ws, len(log), True, first_index=0)
    check(got == log, "the big replay is not the log")
    await next_is(ws, api, cid, "after the big replay", True, len(log))
    await ws.close()


async def t_text(srv, api):
    """Non-ASCII, escapes and a fragmented client message survive both ways."""
    cid = api.conversation()
    ws = await connect(url(srv.port, cid, "?envelope=index"))
    await first_full_state(ws, cid, True)
    odd = "h\u00e9llo \u2713 \U0001f389 \u2028 \"q\" \\ \t \u0001 end"
    ack = api.append(cid, [msg(odd)])
    got = await events(ws, 1, True, first_index=0)
    check(text_of(got[0]) == odd, "the text changed on the way", got)
    check(got == api.log(cid), "not the REST item")
    # a client message sent in three fragments (websockets sends an iterable so)
    body = json.dumps({"role": "user", "content": [{"type": "text", "text": "frag \u2713 " + odd}]},
                      ensure_ascii=False)
    await ws.send([body[:10], body[10:25], body[25:]])
    f = await frame(ws, "the fragmented message")
    check(f.get("index") == 1 and f["event"].get("source") == "user" and
          text_of(f["event"]) == "frag \u2713 " + odd, "the fragmented client message", f)
    check(api.log(cid)[1] == f["event"], "REST has not the same event")
    await ws.close()
    check(ack[0]["index"] == 0, "index", ack)


async def t_ping_and_close(srv, api):
    cid = api.conversation()
    ws = await connect(url(srv.port, cid))
    await first_full_state(ws, cid)
    for data in [b"", b"p1", os.urandom(125)]:
        pong = await ws.ping(data)
        await asyncio.wait_for(pong, T)
    # several pings in flight at once
    pongs = [await ws.ping(b"n%d" % i) for i in range(5)]
    await asyncio.wait_for(asyncio.gather(*pongs), T)
    await next_is(ws, api, cid, "after pings")
    # a client close is echoed (code and all)
    await asyncio.wait_for(ws.close(4321, "bye"), T)
    check(ws.close_code == 4321, "the close was not echoed with 4321", ws.close_code,
          ws.close_reason)
    ws = await connect(url(srv.port, cid))
    await first_full_state(ws, cid)
    await asyncio.wait_for(ws.close(1000), T)
    check(ws.close_code == 1000, "the close was not echoed with 1000", ws.close_code)


# --- with an API key ---------------------------------------------------------------------------

async def t_auth(srv, api):
    cid = api.conversation()
    good = json.dumps({"type": "auth", "session_api_key": KEY})
    # first-frame auth, then full_state; redundant auth frames (right or wrong key) ignored
    ws = await connect(url(srv.port, cid, "?envelope=index"))
    await ws.send(good)
    await first_full_state(ws, cid, True)
    await ws.send(good)
    await ws.send(json.dumps({"type": "auth", "session_api_key": "wrong"}))
    await next_is(ws, api, cid, "after redundant auth", True, 0)
    await ws.close()
    # first-frame auth with a replay
    ws = await connect(url(srv.port, cid, "?resend_mode=all"))
    await ws.send(good)
    await first_full_state(ws, cid)
    got = await events(ws, 1)
    check(got == api.log(cid), "replay after first-frame auth", got)
    await ws.close()
    # bad first frames: 4001, and nothing before it
    for first in [json.dumps({"type": "auth", "session_api_key": "wrong"}),
                  json.dumps({"type": "auth", "session_api_key": ""}),
                  json.dumps({"type": "auth"}),
                  json.dumps({"type": "hello", "session_api_key": KEY}),
                  json.dumps({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
                  "not json", "[]"]:
        ws = await connect(url(srv.port, cid))
        await ws.send(first)
        await closed(ws, 4001, "Authentication failed")
    # no auth frame: 4001 after --ws-auth-timeout (1 s here), not before
    t0 = time.monotonic()
    ws = await connect(url(srv.port, cid))
    await closed(ws, 4001, "Authentication failed")
    check(time.monotonic() - t0 >= 0.9, "closed before the 1 s auth timeout",
          time.monotonic() - t0)
    # legacy: the key in the query or the header authenticates at once
    for query, headers in [(q(session_api_key=KEY), None),
                           ("", {"X-Session-API-Key": KEY}),
                           (q(session_api_key=KEY, resend_mode="all"), None)]:
        ws = await connect(url(srv.port, cid, query), extra_headers=headers)
        await first_full_state(ws, cid)
        if "resend_mode" in query:
            await events(ws, len(api.log(cid)))
        await ws.send(json.dumps({"type": "auth", "session_api_key": "wrong"}))  # ignored
        await next_is(ws, api, cid, "after legacy auth %s %s" % (query, headers))
        await ws.close()
    # wrong legacy keys: refused before the upgrade (403), as upstream
    for query, headers in [(q(session_api_key="wrong"), None),
                           ("", {"X-Session-API-Key": "wrong"}),
                           (q(session_api_key=""), None)]:
        await refused(url(srv.port, cid, query), 403, extra_headers=headers)
    # auth comes first: an unknown conversation is 4001 without the key, 4004 with it
    unknown = str(uuid.uuid4())
    ws = await connect(url(srv.port, unknown))
    await ws.send(json.dumps({"type": "auth", "session_api_key": "wrong"}))
    await closed(ws, 4001, "Authentication failed")
    ws = await connect(url(srv.port, unknown))
    await ws.send(good)
    await closed(ws, 4004, "Conversation not found")
    ws = await connect(url(srv.port, unknown, q(session_api_key=KEY)))
    await closed(ws, 4004, "Conversation not found")
    # REST needs the key too
    st, _ = Api(srv.port).call("GET", "/api/conversations/" + cid)
    check(st == 401, "REST without the key", st)


async def t_cap(srv, api):
    """The server runs with --ws-max-subscribers 2."""
    cid, other = api.conversation(), api.conversation()
    qk = q(session_api_key=KEY)
    a = await connect(url(srv.port, cid, qk))
    b = await connect(url(srv.port, cid, "?envelope=index"))
    await b.send(json.dumps({"type": "auth", "session_api_key": KEY}))
    await first_full_state(a, cid)
    await first_full_state(b, cid, True)
    c = await connect(url(srv.port, cid, qk))
    await closed(c, 1013, "Too many connections for this conversation")
    c = await connect(url(srv.port, cid))
    await c.send(json.dumps({"type": "auth", "session_api_key": KEY}))
    await closed(c, 1013, "Too many connections for this conversation")
    # per conversation: another one still takes two
    o1 = await connect(url(srv.port, other, qk))
    o2 = await connect(url(srv.port, other, qk))
    await first_full_state(o1, other)
    await first_full_state(o2, other)
    # the two subscribers are unaffected by the refusals
    await next_is(a, api, cid, "cap marker")
    f = await events(b, 1, True, first_index=0)
    check(text_of(f[0]) == "cap marker", "b got the marker", f)
    # one leaves: a place is free again (once the server has seen the close)
    await a.close()
    deadline = time.monotonic() + T
    while True:
        d = await connect(url(srv.port, cid, qk))
        try:
            raw = await asyncio.wait_for(d.recv(), T)
            break
        except websockets.exceptions.ConnectionClosed as e:
            check(e.rcvd is not None and e.rcvd.code == 1013,
                  "a new subscriber after one left: closed with %s" % e.rcvd)
            check(time.monotonic() < deadline, "no place within %d s after a subscriber left" % T)
            await asyncio.sleep(0.05)  # polling a condition with a deadline
    check_full_state(json.loads(raw), cid)
    await next_is(d, api, cid, "after the place freed")
    for ws in (b, d, o1, o2):
        await ws.close()


async def t_tls(tmp):
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       capture_output=True, timeout=T)
    check(r.returncode == 0, "openssl req failed", r.stderr.decode(errors="replace"))
    ctx = ssl.create_default_context(cafile=cert)
    with Server(api_key=KEY, args=("--tls-cert", cert, "--tls-key", key)) as srv:
        check(srv.scheme == "https", "the TLS server did not announce https://")
        api = Api(srv.port, KEY, ctx, NO_STUCK)
        cid = api.conversation()
        api.append(cid, [msg("tls %d" % i) for i in range(3)])
        log = api.log(cid)
        ws = await connect(url(srv.port, cid, "?resend_mode=all&envelope=index", "wss"), ssl=ctx)
        await ws.send(json.dumps({"type": "auth", "session_api_key": KEY}))
        await first_full_state(ws, cid, True)
        got = await events(ws, 3, True, first_index=0)
        check(got == log, "wss replay", got)
        await next_is(ws, api, cid, "tls live", True, 3)
        big = "w" * 70000
        await ws.send(json.dumps({"role": "user", "content": [{"type": "text", "text": big}]}))
        f = await frame(ws, "the big user message over wss")
        check(f.get("index") == 4 and text_of(f["event"]) == big, "the big message over wss",
              str(f)[:300])
        pong = await ws.ping(b"tls")
        await asyncio.wait_for(pong, T)
        await ws.close()
        await refused(url(srv.port, cid, q(session_api_key="bad"), "wss"), 403, ssl=ctx)
        # plain ws:// to the TLS port does not get a WebSocket
        plain_refused = False
        try:
            await connect(url(srv.port, cid))
        except Exception:  # noqa: BLE001 - any failure of the handshake will do
            plain_refused = True
        check(plain_refused, "a plain ws:// handshake succeeded on the TLS port")


async def run(name, fn, *args):
    t0 = time.monotonic()
    await asyncio.wait_for(fn(*args), 10 * T)
    print("ok %s (%.1f s)" % (name, time.monotonic() - t0), flush=True)


async def main():
    with Server(env={"TZ": TZ}) as srv:
        api = Api(srv.port, body=NO_STUCK)
        for name, fn in [("handshake", t_handshake), ("live", t_live),
                         ("replay all / resend_all", t_replay_all),
                         ("replay since", t_replay_since), ("after_id", t_after_id),
                         ("answers before the upgrade", t_before_upgrade),
                         ("4004", t_unknown_conversation), ("client frames", t_client_frames),
                         ("ping and close", t_ping_and_close),
                         ("big replay", t_big_replay), ("text", t_text)]:
            await run(name, fn, srv, api)
            check(srv.died() is None, "serve died during %s" % name, srv.died())
    with Server(api_key=KEY, args=("--ws-auth-timeout", "1s",
                                   "--ws-max-subscribers", "2")) as srv:
        api = Api(srv.port, KEY, body=NO_STUCK)
        await run("auth", t_auth, srv, api)
        await run("subscriber cap", t_cap, srv, api)
    tmp = tempfile.mkdtemp(prefix="parley-wss.")
    try:
        await run("wss", t_tls, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ws_python_test: ok")


if __name__ == "__main__":
    asyncio.run(main())
