"""view_test.py - the visualizer on a real `parley serve`: GET .../state
(the whole state, ?after_index polls, errors), the WebSocket view
(?view=blocks: a state frame, then changes; resumed with after_id or
after_index; a client that applies what it gets holds exactly what /state
says, also while a producer appends without pause), a visualizer that stops
when idle and starts again on use, a long log, and `parley tail --blocks`.

Bounded: fixed event counts, every wait has a deadline. Standard library
only; run with /usr/bin/python3. PARLEY=<binary>.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_raw  # noqa: E402
from parley_client import Api, check, run, serving, summary, wait_for  # noqa: E402

TS = "2026-08-22T10:15:00.000001"


def user(eid, text):
    return {"id": eid, "timestamp": TS, "source": "user", "kind": "MessageEvent",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": text}]}}


def agent(eid, text):
    return {"id": eid, "timestamp": TS, "source": "agent", "kind": "MessageEvent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def action(eid, call, cmd, resp):
    return {"id": eid, "timestamp": TS, "source": "agent", "kind": "ActionEvent",
            "thought": [{"type": "text", "text": "running " + cmd}], "tool_name": "terminal",
            "tool_call_id": call, "llm_response_id": resp,
            "tool_call": {"id": call, "name": "terminal",
                          "arguments": json.dumps({"command": cmd}), "origin": "completion"},
            "action": {"kind": "TerminalAction", "command": cmd}}


def observation(eid, call, aid, out, error=False):
    return {"id": eid, "timestamp": TS, "source": "environment", "kind": "ObservationEvent",
            "tool_name": "terminal", "tool_call_id": call, "action_id": aid,
            "observation": {"kind": "TerminalObservation", "is_error": error,
                            "content": [{"type": "text", "text": out}]}}


def turn(n):
    """Events of one user turn, ids unique by n: 5 events."""
    a, c = "a%d" % n, "c%d" % n
    return [user("u%d" % n, "task %d" % n), action(a, c, "ls %d" % n, "r%d" % n),
            observation("o%d" % n, c, a, "out %d" % n), agent("m%d" % n, "done %d" % n),
            agent("n%d" % n, "and more %d" % n)]


def ids(blocks):
    return [b["id"] for b in blocks]


# -------------------------------------------------------------- a client ---

class Blocks:
    """A view=blocks client that applies every frame to its own state."""

    def __init__(self, port, cid, query=""):
        self.s, rest = ws_raw.handshake(port, "/sockets/events/%s?view=blocks%s" % (cid, query))
        self.r = ws_raw.Reader(self.s, rest)
        self.state = {"blocks": [], "subagents": []}
        self.index = None
        self.frames = 0

    def close(self):
        self.s.close()

    def _conv(self, name):
        if name == "main":
            return self.state["blocks"]
        for e in self.state["subagents"]:
            if e["toolUseId"] == name:
                return e.setdefault("blocks", [])
        check(False, "a block for an unknown subagent", name)

    def apply(self, f):
        self.index = f["index"]
        if "state" in f:
            self.state = f["state"]
        elif "subagent" in f:
            e = f["subagent"]
            for have in self.state["subagents"]:
                if have["toolUseId"] == e["toolUseId"]:
                    blocks = have.get("blocks", [])
                    have.clear()
                    have.update(e)
                    have["blocks"] = blocks
                    return
            self.state["subagents"].append(dict(e, blocks=[]))
        elif "upsert" in f:
            blocks, b = self._conv(f["conversation"]), f["upsert"]
            for i, have in enumerate(blocks):
                if have["id"] == b["id"]:
                    blocks[i] = b
                    return
            blocks.append(b)
        elif "removed" in f:
            blocks = self._conv(f["conversation"])
            blocks[:] = [b for b in blocks if b["id"] != f["removed"]]
        else:
            check(False, "a frame of no known shape", f)

    def next(self):
        f = self.r.next()
        check(f is not None, "the server closed the view")
        check(f[0] == 1, "a text frame", f)
        self.frames += 1
        frame = json.loads(f[1])
        self.apply(frame)
        return frame

    def until_index(self, want, deadline=60):
        self.s.settimeout(deadline)
        while self.index is None or self.index < want:
            self.next()


def state(api, cid, after=None):
    q = "" if after is None else "?after_index=%d" % after
    st, b = api.call("GET", "/api/conversations/%s/state%s" % (cid, q))
    check(st == 200, "GET state", st, b)
    return b


def same(client, full):
    want = {"blocks": full["blocks"], "subagents": full["subagents"]}
    if client.state == want:
        return
    got = client.state["blocks"]
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(got, want["blocks"])) if a != b][:1]
    check(False, "the view's state is /state's", "blocks %d vs %d" % (len(got), len(want["blocks"])),
          diff or (client.state["subagents"], want["subagents"]))


# ------------------------------------------------------------------ tests ---

def t_state_whole(api):
    cid = api.conversation()
    b = state(api, cid)
    check(b == {"index": -1, "blocks": [], "subagents": [], "removed": []}, "empty", b)
    api.append(cid, turn(1))
    b = state(api, cid)
    check(b["index"] == 4, "index of the last event", b["index"])
    check(ids(b["blocks"]) == ["u1", "a1-thought", "c1", "result-c1", "m1", "n1"], "order",
          ids(b["blocks"]))
    call, result = b["blocks"][2], b["blocks"][3]
    check(call["type"] == "tool_use" and call["toolName"] == "terminal"
          and call["input"] == {"command": "ls 1"} and call["status"] == "complete", "call", call)
    check(result["type"] == "tool_result" and result["toolUseId"] == "c1"
          and result["output"] == "out 1" and result["isError"] is False, "result", result)
    check(b["blocks"][0]["timestamp"] == TS, "the event's timestamp", b["blocks"][0])


def t_state_after_index(api):
    cid = api.conversation()
    api.append(cid, turn(1))
    api.append(cid, [action("a2", "c2", "false", "r2")])
    b = state(api, cid, after=4)
    check(ids(b["blocks"]) == ["a2-thought", "c2"] and b["blocks"][1]["status"] == "pending",
          "only the new call, pending", b)
    api.append(cid, [observation("o2", "c2", "a2", "exit 1", error=True)])
    b = state(api, cid, after=5)
    check(b["index"] == 6 and ids(b["blocks"]) == ["c2", "result-c2"], "the call and its result",
          b)
    check(b["blocks"][1]["isError"] is True, "a failed result", b)
    b = state(api, cid, after=6)
    check(b["blocks"] == [] and b["index"] == 6, "nothing after the last", b)
    b = state(api, cid, after=1000)
    check(b["blocks"] == [] and b["index"] == 6, "an index past the end: nothing changed", b)


def t_state_errors(api):
    st, b = api.call("GET", "/api/conversations/%s/state" % ("0" * 32))
    check(st == 404 and "not found" in b["detail"], "unknown conversation", st, b)
    cid = api.conversation()
    for bad in ["-1", "x", "1.5", "", "99999999999999999999"]:
        st, b = api.call("GET", "/api/conversations/%s/state?after_index=%s" % (cid, bad))
        check(st == 422 and "after_index" in b["detail"], "bad after_index " + bad, st, b)
    st, b = api.call("POST", "/api/conversations/%s/state" % cid, {})
    check(st == 405, "POST", st, b)


def t_state_range(api):
    cid = api.conversation()
    api.append(cid, turn(1) + turn(2) + turn(3))  # 18 blocks
    whole = state(api, cid)["blocks"]
    st, b = api.call("GET", "/api/conversations/%s/state?from=4&limit=5" % cid)
    check(st == 200 and b["total"] == 18 and b["from"] == 4 and b["index"] == 14
          and b["conversation"] == "main" and b["blocks"] == whole[4:9], "a page", st, b)
    st, b = api.call("GET", "/api/conversations/%s/state?from=16" % cid)
    check(st == 200 and b["blocks"] == whole[16:], "the last page, limit 100 by default", b)
    st, b = api.call("GET", "/api/conversations/%s/state?from=99" % cid)
    check(st == 200 and b["blocks"] == [] and b["total"] == 18, "past the end: none", b)
    st, b = api.call("GET", "/api/conversations/%s/state?from=0&conversation=nope" % cid)
    check(st == 404 and "subagent" in b["detail"], "an unknown subagent", st, b)
    for q in ["from=-1", "from=0&limit=0", "from=0&limit=1001", "limit=5",
              "conversation=main", "after_index=1&from=0"]:
        st, b = api.call("GET", "/api/conversations/%s/state?%s" % (cid, q))
        check(st == 422, "refused: " + q, st, b)


def t_view_live(srv, api):
    cid = api.conversation()
    api.append(cid, turn(1))
    c = Blocks(srv.port, cid)
    first = c.next()
    check("state" in first and first["index"] == 4, "a state frame first", first)
    api.append(cid, turn(2))
    c.until_index(9)
    same(c, state(api, cid))
    c.close()


def t_view_resume(srv, api):
    cid = api.conversation()
    api.append(cid, turn(1) + turn(2))
    c = Blocks(srv.port, cid, "&after_id=o1")  # event 2
    f = c.next()
    check("state" not in f and f["index"] in (2, 9), "changes only, from event 2 on", f)
    c.until_index(9)
    got = [b["id"] for b in c.state["blocks"]]
    check(got == ["m1", "n1", "u2", "a2-thought", "c2", "result-c2", "m2", "n2"],
          "the blocks changed after event 2", got)
    c.close()
    c = Blocks(srv.port, cid)
    c.until_index(9)
    c.close()
    # a client at index 4 resumes with after_index and ends equal to /state
    part = Blocks(srv.port, cid, "&after_index=4")
    part.state = {"blocks": state_at(api, cid, 5), "subagents": []}
    part.until_index(9)
    same(part, state(api, cid))
    part.close()
    s, rest = ws_raw.handshake(srv.port, "/sockets/events/%s?view=blocks&after_id=nope" % cid)
    check(ws_raw.Reader(s, rest).close_code() == 1008, "an unknown after_id")
    s.close()
    for q in ["view=pictures", "view=blocks&resend_mode=all", "view=blocks&after_index=x",
              "view=blocks&after_index=1&after_id=o1", "after_index=3"]:
        head = upgrade_status(srv.port, "/sockets/events/%s?%s" % (cid, q))
        check(head.startswith(b"HTTP/1.1 422"), "refused before the upgrade: " + q, head)


def t_view_resume_cold(srv):
    """view=blocks with after_id on a conversation nobody has opened since
    the server started: its log is opened in the thread pool, not on the
    socket's loop (issue 22), and the view starts after the event."""
    api = Api(srv.port)
    cid = api.conversation()
    api.append(cid, turn(1) + turn(2))
    srv.restart()
    c = Blocks(srv.port, cid, "&after_id=o1")  # event 2: the first request naming cid
    f = c.next()
    check("state" not in f and f["index"] in (2, 9), "changes only, from event 2 on", f)
    c.until_index(9)
    got = [b["id"] for b in c.state["blocks"]]
    check(got == ["m1", "n1", "u2", "a2-thought", "c2", "result-c2", "m2", "n2"],
          "the blocks changed after event 2", got)
    c.close()
    srv.restart()
    s, rest = ws_raw.handshake(srv.port, "/sockets/events/%s?view=blocks&after_id=nope" % cid)
    check(ws_raw.Reader(s, rest).close_code() == 1008, "an unknown after_id, not open yet")
    s.close()


def upgrade_status(port, path):
    """An upgrade request's answer, up to the end of its head."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
               % path).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        got = s.recv(4096)
        if not got:
            break
        buf += got
    s.close()
    return buf


def state_at(api, cid, n):
    """The blocks of the first n events (a fresh conversation with them)."""
    log = api.log(cid)[:n]
    other = api.conversation()
    api.append(other, log)
    return state(api, other)["blocks"]


def t_view_while_appending(srv, api):
    """Clients join at random points of a producer's run; each ends with
    exactly /state's blocks."""
    cid = api.conversation()
    done = threading.Event()
    errors = []

    def produce():
        try:
            for n in range(40):
                api.append(cid, turn(n))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        done.set()

    t = threading.Thread(target=produce)
    t.start()
    clients = []
    for _ in range(8):
        clients.append(Blocks(srv.port, cid))
        clients[-1].next()
    t.join(120)
    check(done.is_set() and not errors, "the producer finished", errors)
    final = state(api, cid)
    for c in clients:
        c.until_index(final["index"])
        same(c, final)
        c.close()


def t_delete_closes(srv, api):
    cid = api.conversation()
    api.append(cid, turn(1))
    c = Blocks(srv.port, cid)
    c.next()
    st, _ = api.call("DELETE", "/api/conversations/%s" % cid)
    check(st == 200, "delete", st)
    code = c.r.close_code()
    check(code in (4004, 1011), "the view closes when its conversation goes", code)
    c.close()
    st, b = api.call("GET", "/api/conversations/%s/state" % cid)
    check(st == 404, "state of a deleted conversation", st, b)


def gauge(api):
    """parley_visualizers from /metrics (text, not JSON)."""
    h = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
    h.request("GET", "/metrics")
    text = h.getresponse().read().decode()
    h.close()
    for line in text.splitlines():
        if line.startswith("parley_visualizers "):
            return int(line.split()[1])
    check(False, "no parley_visualizers in /metrics")


def t_idle_stop(srv, api):
    cid = api.conversation()
    api.append(cid, turn(1))
    state(api, cid)
    check(gauge(api) >= 1, "a visualizer runs once asked")
    wait_for("the idle visualizer to stop", lambda: gauge(api) == 0)
    b = state(api, cid)  # starts again, from the log
    check(b["index"] == 4 and len(b["blocks"]) == 6, "the same state again", b)
    c = Blocks(srv.port, cid)
    c.next()
    c.close()
    wait_for("the visualizer to stop once its last watcher left", lambda: gauge(api) == 0)


def t_long_log(api):
    cid = api.conversation()
    for base in range(0, 1000, 100):  # 5,000 events in batches of 500
        api.append(cid, [e for n in range(base, base + 100) for e in turn(n)])
    b = state(api, cid)
    check(b["index"] == 4999 and len(b["blocks"]) == 6000, "all folded", b["index"],
          len(b["blocks"]))
    st, page = api.call("GET", "/api/conversations/%s/state?from=3000&limit=1000" % cid)
    check(st == 200 and page["blocks"] == b["blocks"][3000:4000], "a page of a long one", st)
    b = state(api, cid, after=4994)
    check(ids(b["blocks"]) == ["u999", "a999-thought", "c999", "result-c999", "m999", "n999"],
          "the last turn only", ids(b["blocks"]))


def t_tail_blocks(srv, api):
    cid = api.conversation()
    api.append(cid, turn(1) + [action("a9", "c9", "sleep", "r9")])
    out = subprocess.run([os.environ["PARLEY"], "tail", "http://127.0.0.1:%d" % srv.port, cid,
                          "--blocks"], capture_output=True, timeout=60, env=dict(os.environ,
                                                                                  NO_COLOR="1"))
    text = out.stdout.decode()
    check(out.returncode == 0, "tail --blocks", out.returncode, out.stderr)
    tool = text.index("Tool: terminal")
    check(text.index("Arguments:", tool) < text.index("Result:", tool)
          < text.index("out 1", tool), "the call with its result under it", text)
    check(text.index("task 1") < tool < text.index("done 1"), "in log order", text)
    check("sleep" in text[text.index("done 1"):], "the pending call printed at the end", text)
    bad = subprocess.run([os.environ["PARLEY"], "tail", "http://127.0.0.1:%d" % srv.port, cid,
                          "--blocks", "--json"], capture_output=True, timeout=60)
    check(bad.returncode == 2 and b"--blocks" in bad.stderr, "--blocks --json", bad.stderr)


def t_too_many_blocks(srv, api):
    cid = api.conversation()
    api.append(cid, turn(1))  # 6 blocks: within the bound of 10
    check(len(state(api, cid)["blocks"]) == 6, "under the bound")
    c = Blocks(srv.port, cid)
    c.next()
    api.append(cid, turn(2))  # 12: past it
    st, b = api.call("GET", "/api/conversations/%s/state" % cid)
    check(st == 507 and "viz-max-blocks" in b["detail"], "past the bound: 507 saying why", st, b)
    code = c.r.close_code()
    check(code == 1011, "the view closes, saying why", code)
    c.close()
    st, b = api.call("POST", "/api/conversations/%s/events/append" % cid, turn(3))
    check(st == 201, "the conversation itself goes on", st, b)


def t_hosted_agent(srv, api):
    """A conversation the bundled demo agent answers (ACP through the
    adapter) reads as blocks: the user's message, the agent's tool calls
    each with its result, its message."""
    cid = api.conversation()
    st, b = api.call("POST", "/api/conversations/%s/events" % cid,
                     {"role": "user", "content": [{"type": "text", "text": "hello"}],
                      "run": True})
    check(st == 200, "post", st, b)

    def finished():
        b = state(api, cid)
        done = [x for x in b["blocks"] if x["type"] == "system"
                and x.get("metadata", {}).get("executionStatus") == "finished"]
        return b if done else None
    b = wait_for("the demo agent's turn to finish", finished)
    types = [x["type"] for x in b["blocks"]]
    check(types[0] == "user_message" and "assistant_text" in types, "who said what", types)
    calls = [x for x in b["blocks"] if x["type"] == "tool_use"]
    check(calls, "the agent's tool calls", types)
    by_id = {x["id"]: x for x in b["blocks"]}
    for c in calls:
        r = by_id.get("result-" + c["toolUseId"])
        check(c["status"] == "complete" and r is not None
              and types.index("tool_result", types.index("tool_use")) > 0,
              "each call complete with its result", c, r)
    check(all(x["status"] != "pending" for x in b["blocks"]), "nothing left pending", b)


def main():
    t0 = time.monotonic()
    demo = ["--agent", "demo='%s' demo-agent" % os.environ["PARLEY"]]
    with serving("stop", args=["--viz-idle", "200ms"] + demo) as srv:
        api = Api(srv.port)
        run("state_whole", t_state_whole, api)
        run("state_after_index", t_state_after_index, api)
        run("state_errors", t_state_errors, api)
        run("state_range", t_state_range, api)
        run("view_live", t_view_live, srv, api)
        run("view_resume", t_view_resume, srv, api)
        run("view_while_appending", t_view_while_appending, srv, api)
        run("delete_closes", t_delete_closes, srv, api)
        run("idle_stop", t_idle_stop, srv, api)
        run("long_log", t_long_log, api)
        run("tail_blocks", t_tail_blocks, srv, api)
        hosted = Api(srv.port, body={"agent": {"kind": "ACPAgent", "acp_command": ["demo"]}})
        run("hosted_agent", t_hosted_agent, srv, hosted)
    with serving("cold_stop") as srv:
        run("view_resume_cold", t_view_resume_cold, srv)
    with serving("stop_bounded", args=["--viz-max-blocks", "10"]) as srv:
        run("too_many_blocks", t_too_many_blocks, srv, Api(srv.port))
    sys.exit(summary(t0))


if __name__ == "__main__":
    main()
