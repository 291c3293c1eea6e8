#!/usr/bin/python3
"""idle_test.py - idle conversations close their logs, and open files run out
cleanly. Against a real `parley serve` (run by test_idle.sh; $PARLEY).

1. --idle-close 300ms: conversations that nobody asks anything close their
   logs (the metric drops to 0, and the server holds none of their files),
   are listed and read without being woken (their actors stop too), and
   the first append starts them again with the state kept: a tool call left pending before the
   close is still pending after it (its result is accepted once, a second one
   refused), and a WebSocket subscriber from before the close gets the new
   events. A restart then finds everything in order, and a search by status
   (which asks each conversation once) finds the one paused before it.
2. After kill -9 (no summaries), a conversation whose log cannot be opened
   is listed as "error" with status_detail saying why; the list answers.
3. A hard open-files limit of 128 with --idle-close 0 (never): creating
   conversations until the files run out answers 503 with Retry-After and a
   reason that says so, never 404; the conversations created before still
   answer, and after one is deleted a new one can be made.

Python's websockets (Debian) for the subscriber; nothing sleeps to
synchronize: waits are conditions polled against a deadline.
"""

import asyncio
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import websockets  # noqa: E402
from api_test import (action, all_events, append, conv_path, event_count, metric,  # noqa: E402
                      new_conv, observation, refused, status_of, user_msg)
from parley_client import Server, check, wait_for  # noqa: E402

T = 30  # seconds for any one wait


def conversation_files(srv):
    """The conversations whose files the server has open (their hex ids)."""
    fds, convs = "/proc/%d/fd" % srv.proc.pid, os.path.join(srv.data, "conversations") + "/"
    out = set()
    for fd in os.listdir(fds):
        try:
            path = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue  # closed meanwhile
        if path.startswith(convs):
            out.add(path[len(convs):].split("/")[0])
    return out


def logs_open(c):
    return metric(c.request("GET", "/metrics").raw.decode(), "parley_conversations_open")


async def next_event(ws):
    f = json.loads(await asyncio.wait_for(ws.recv(), T))
    check("index" in f and "event" in f, "an envelope=index frame", f)
    return f


async def idle_close():
    with Server(args=["--idle-close", "300ms"]) as srv:
        c = srv.client()
        quiet = []
        for i in range(40):
            cid = new_conv(c)
            append(c, cid, [user_msg(None, "task %d" % i), action("a%d" % i, "c%d" % i, "r%d" % i)])
            quiet.append(cid)
        watched = quiet.pop()
        url = "ws://127.0.0.1:%d/sockets/events/%s?envelope=index&resend_all=true" % (srv.port,
                                                                                   watched)
        async with websockets.connect(url, open_timeout=T, close_timeout=T) as ws:
            state = json.loads(await asyncio.wait_for(ws.recv(), T))
            check(state.get("event", {}).get("key") == "full_state", "the state first", state)
            seen = [await next_event(ws) for _ in range(2)]  # the user message, the action
            check([f["index"] for f in seen] == [0, 1], "the log so far, in order", seen)
            wait_for("every log to close", lambda: logs_open(c) == 0, T)
            # at rest and attached to nothing, their actors stop as well; the
            # watched one keeps them for its subscriber
            wait_for("the idle conversations' actors to stop",
                     lambda: metric(c.request("GET", "/metrics").raw.decode(),
                                    "parley_conversations_active") == 1, T)
            # the subscriber reads through its own handle: its log alone stays open
            hex_watched = watched.replace("-", "")
            wait_for("the idle conversations' files to close",
                     lambda: conversation_files(srv) == {hex_watched}, T)

            # asleep, they answer without waking
            check(status_of(c, quiet[0]) == "idle", "the status of an asleep conversation")
            got = c.expect("GET", "/api/conversations/search?limit=100", 200)
            check(len(got["items"]) == 40, "all 40 listed", len(got["items"]))
            check(event_count(c, quiet[0]) == 2, "events counted from the store")
            check(logs_open(c) == 0, "reading woke nobody", logs_open(c))

            # the first append opens the log again: the gate kept the pending call
            refused(c, quiet[1], action("a-other", "c-other", "r-other"), "interleaved_action",
                    pending=["c1"])
            append(c, quiet[1], observation("o1", "c1"))
            refused(c, quiet[1], observation("o1b", "c1"), "duplicate_tool_result")
            check(logs_open(c) >= 1, "the append opened the log")
            evs = all_events(c, quiet[1])
            check([e["id"] for e in evs][-1] == "o1" and len(evs) == 3,
                  "the log after the close", [e["id"] for e in evs])

            # the subscriber from before the close gets what comes after it
            append(c, watched, observation("o39", "c39"))
            f = await next_event(ws)
            check(f["index"] == 2 and f["event"]["id"] == "o39",
                  "the subscriber's next frame is the new event", f)

        c.expect("POST", conv_path(quiet[0], "/pause"), 200)
        wait_for("the logs to close again", lambda: logs_open(c) == 0, T)
        srv.restart()
        c = srv.client()
        check(event_count(c, quiet[1]) == 3 and event_count(c, watched) == 3,
              "a restart finds every event")
        check(all_events(c, quiet[1])[-1]["id"] == "o1", "in order")
        # lists after a restart: a clean one left the summaries (taken back
        # at start, so the file is gone); after kill -9 there are none, and a
        # list by status asks each conversation once
        for how in ("clean", "kill -9"):
            check(not os.path.exists(os.path.join(srv.data, "summaries.jsonl")),
                  "the summaries are taken back once (%s)" % how)
            paused = c.expect("GET", "/api/conversations/search?status=paused", 200)["items"]
            check([i["id"] for i in paused] == [quiet[0]],
                  "after a %s restart, search?status=paused finds the paused one" % how, paused)
            check(paused[0]["event_count"] == event_count(c, quiet[0]), "with its count", paused)
            n = int(c.request("GET", "/api/conversations/count?status=idle").raw)
            if how == "clean":
                check(logs_open(c) == 0, "lists after a clean restart open no log", logs_open(c))
            idle = [cid for cid in quiet + [watched] if status_of(c, cid) == "idle"]
            check(n == len(idle) == len(quiet), "count?status=idle (%s)" % how, n, len(idle))
            if how == "clean":
                srv.kill()
                srv.start()
                c = srv.client()
        append(c, quiet[2], observation("o2", "c2"))


def unanswered_listed():
    """After kill -9 no summaries are left, so a list asks each conversation;
    one whose log cannot be opened is listed as "error" with the reason,
    never a 503 for the whole list (asked for alone it is a 503 naming it)."""
    with Server() as srv:
        c = srv.client()
        ok, broken = new_conv(c), new_conv(c)
        for cid in (ok, broken):
            append(c, cid, [user_msg(None, "task"), action("a", "c", "r"), observation("o", "c")])
        srv.restart()  # clean: the journal is retired, the summaries saved...
        srv.client().expect("GET", "/api/conversations/count", 200)
        srv.kill()  # ...and taken back by this start: after kill -9 none remain
        check(not os.path.exists(os.path.join(srv.data, "summaries.jsonl")), "no summaries left")
        d = os.path.join(srv.data, "conversations", broken.replace("-", ""))
        for f in os.listdir(d):
            if f.endswith(".seg"):  # a segment that cannot be opened (EISDIR)
                os.remove(os.path.join(d, f))
                os.mkdir(os.path.join(d, f))
        srv.start()
        c = srv.client()
        for path in ("/api/conversations/search?limit=10",
                     "/api/conversations/search?sort_order=UPDATED_AT_DESC"):
            items = {i["id"]: i for i in c.expect("GET", path, 200)["items"]}
            check(set(items) == {ok, broken}, "both listed", path, items)
            check(items[ok]["execution_status"] == "idle" and "status_detail" not in items[ok],
                  "the readable one as it is", items[ok])
            b = items[broken]
            check(b["execution_status"] == "error" and "cannot answer" in b["status_detail"],
                  "the unreadable one says why", b)
        errs = c.expect("GET", "/api/conversations/search?status=error", 200)["items"]
        check([i["id"] for i in errs] == [broken], "search?status=error finds it", errs)
        check(int(c.request("GET", "/api/conversations/count?status=error").raw) == 1,
              "counted as error")
        check(int(c.request("GET", "/api/conversations/count?status=idle").raw) == 1,
              "the other one idle")
        many = c.expect("GET", "/api/conversations?ids=%s&ids=%s" % (ok, broken), 200)
        check([i["execution_status"] for i in many] == ["idle", "error"], "a batch get too", many)
        r = c.request("GET", conv_path(broken))
        check(r.status == 503 and broken in r.body.get("detail", ""),
              "asked alone: 503 naming it", r.status, r.body)


def files_run_out():
    # the limit is set on the shell's side of the exec (prlimit is util-linux)
    with Server(args=["--idle-close", "0"], wrap=["prlimit", "--nofile=128:128"]) as srv:
        c = srv.client()
        made, answer = [], None
        for _ in range(200):
            r = c.request("POST", "/api/conversations", body={})
            if r.status != 201:
                answer = r
                break
            made.append(r.body["id"])
        check(answer is not None, "128 open files cannot hold 200 open conversations")
        check(answer.status == 503, "out of files is a 503, not a 404", answer)
        check(answer.headers.get("retry-after") == "1", "a 503 says when to retry", answer.headers)
        check("Too many open files" in answer.body.get("detail", ""),
              "the reason is said", answer.body)
        check(len(made) >= 20, "conversations were made before the files ran out", len(made))
        for cid in made[:3] + made[-3:]:
            check(status_of(c, cid) == "idle", "an earlier conversation still answers", cid)
        c.expect("DELETE", conv_path(made[-1]), 200)
        wait_for("a new conversation once one is gone",
                 lambda: c.request("POST", "/api/conversations", body={}).status == 201, T)


def main():
    for name, fn in (("idle_close", lambda: asyncio.run(idle_close())),
                     ("unanswered_listed", unanswered_listed),
                     ("files_run_out", files_run_out)):
        fn()
        print("ok", name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
