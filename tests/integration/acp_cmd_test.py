#!/usr/bin/python3
"""acp_cmd_test.py - `parley acp`, the ACP agent editors spawn, end to end:
against a real `parley serve` hosting the demo agent (--url) and on its own
data directory (--data), driven by the official SDK's client
(tests/node/acp_client.mjs: every message checked against the protocol's
schema) and by raw lines for what an SDK would never send.

Checks: the updates carry what the hosted agent did (tool call ids, titles,
statuses, content, message text, as the conversation's log says), turns end
with end_turn, session/load in a fresh process replays it all with the
prompts as user_message_chunk, cancel gives cancelled, another client's
message shows in the editor, malformed input gets the right JSON-RPC error
and the process serves on, stdin's end exits 0. In both modes: the
permission round trip (allow, reject; --always-approve asks nothing),
prompts of images and embedded resources (what the conversation keeps, what
the replay gives back, what the hosted agent hears), and stdin's end while
a turn runs (answered cancelled, exit 0, the conversation paused). Against
a server with an API key (with it; a clear error without or with a wrong
one) and over https (--ca-file; an unverified server said).

Run by test_acp_cmd.sh (ctest sets $PARLEY). Every process started here is
stopped here; ports are the kernel's; waits are bounded reads, no sleeps.
"""

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from parley_client import check, run, serving, summary, wait_for  # noqa: E402

PARLEY = os.environ["PARLEY"]
AGENT = os.path.abspath(os.path.join(HERE, "..", "node", "acp_agent.mjs"))
CLIENT = os.path.abspath(os.path.join(HERE, "..", "node", "acp_client.mjs"))
DEMO = "demo=%s demo-agent" % PARLEY
SLOW = "slow=%s demo-agent --delay-ms 400 --chunks 6" % PARLEY
TMP = tempfile.mkdtemp(prefix="parley-acp-cmd.")


def sdk_client(cmd, *args, timeout_ms=60000):
    """acp_client.mjs on `parley acp` cmd: (summary, messages by process)."""
    cwd = tempfile.mkdtemp(dir=TMP)
    p = subprocess.run(["node", CLIENT, "--cwd", cwd, "--timeout-ms", str(timeout_ms)] +
                       list(args) + ["--"] + cmd, capture_output=True, timeout=timeout_ms / 1000 + 30)
    msgs = {1: [], 2: []}
    summ = None
    for line in p.stdout.decode().splitlines():
        m = json.loads(line)
        if "summary" in m:
            summ = m["summary"]
        else:
            msgs[m["agent"]].append(m["message"])
    check(summ is not None, "no summary from acp_client", p.stderr.decode()[-2000:])
    return summ, msgs, p


def updates(msgs):
    return [m["params"]["update"] for m in msgs if m.get("method") == "session/update"]


def without_ids(u):
    return {k: v for k, v in u.items() if k != "messageId"}


def check_turns(summ, msgs, prompts):
    """Each prompt's turn: end_turn, the demo agent's tool call completed,
    its reply; the replay equals the turns with each prompt before its own."""
    check(summ["ok"], "the SDK client found errors", summ["errors"])
    check(summ["agent"]["agentCapabilities"]["loadSession"] is True, "loadSession", summ["agent"])
    check([t["stopReason"] for t in summ["turns"]] == ["end_turn"] * len(prompts),
          "every turn ends with end_turn", summ["turns"])
    for i, (t, p) in enumerate(zip(summ["turns"], prompts)):
        check(t["toolCalls"] == {"call-%d" % (i + 1): "completed"}, "the demo agent's call", t)
        check(t["text"].startswith("You said: " + p), "the reply's text", t)
        check(t["updatesAfterAnswer"] == 0, "nothing after the answer", t)
    live = updates(msgs[1])
    calls = [u for u in live if u["sessionUpdate"] == "tool_call"]
    check(all(c["title"] == "Writing notes.md" and c["kind"] == "edit" for c in calls),
          "tool calls carry the agent's title and kind", calls)
    results = [u for u in live if u["sessionUpdate"] == "tool_call_update"]
    check(all(r["status"] == "completed" and r["content"][0]["type"] == "diff" for r in results),
          "results carry status and content", results)
    check(not any(u["sessionUpdate"] == "user_message_chunk" for u in live),
          "the editor's own prompt is not echoed back", live)
    # the replay: each prompt as a user_message_chunk, then its turn's updates
    want, k = [], 0
    for t in summ["turns"]:
        want.append({"sessionUpdate": "user_message_chunk",
                     "content": {"type": "text", "text": t["prompt"]}})
        want += live[k:k + t["updates"]]
        k += t["updates"]
    got = [without_ids(u) if u["sessionUpdate"] == "user_message_chunk" else u
           for u in updates(msgs[2])]
    check(summ["load"]["answered"], "session/load answered", summ["load"])
    check(got == want, "the replay is the live turns with their prompts",
          json.dumps(got)[:1500], json.dumps(want)[:1500])
    # the answer to session/load comes after the replay
    kinds = [m.get("method") or ("answer" if "result" in m else "error") for m in msgs[2]]
    check(kinds.index("answer", 1) > max(i for i, k in enumerate(kinds) if k == "session/update"),
          "the load's answer after its updates", kinds)
    return live


def turns_url(srv):
    prompts = ["hello there", "and again"]
    args = sum((["--prompt", p] for p in prompts), []) + ["--load"]
    summ, msgs, _ = sdk_client([PARLEY, "acp", "--url", srv.url()], *args)
    live = check_turns(summ, msgs, prompts)
    # the updates say what the log holds: the same tool call ids, in order
    c = srv.client()
    evs = c.expect("GET", "/api/conversations/%s/events/search?limit=100" % summ["sessionId"],
                   200)["items"]
    ids = [e["tool_call_id"] for e in evs if e["kind"] == "ActionEvent"]
    check(ids == [u["toolCallId"] for u in live if u["sessionUpdate"] == "tool_call"],
          "tool call ids as in the log", ids)


def turns_data():
    data = tempfile.mkdtemp(dir=TMP)
    prompts = ["in process"]
    summ, msgs, _ = sdk_client([PARLEY, "acp", "--data", data, "--agent", DEMO],
                               "--prompt", prompts[0], "--load")
    check_turns(summ, msgs, prompts)


def cancel(cmd):
    summ, msgs, _ = sdk_client(cmd, "--prompt", "slowly", "--cancel-after-updates", "1")
    check(summ["ok"], "the SDK client found errors", summ["errors"])
    check(summ["turns"][0]["stopReason"] == "cancelled", "cancel gives cancelled", summ["turns"])


class Raw:
    """`parley acp` on pipes, for lines no SDK would send."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(os.path.join(TMP, "raw.err"), "ab"))
        self.buf = b""

    def send(self, line):
        self.p.stdin.write((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n")
        self.p.stdin.flush()

    def read(self, timeout=30):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            check(left > 0 and select.select([self.p.stdout], [], [], left)[0],
                  "no line from parley acp within %d s" % timeout)
            chunk = os.read(self.p.stdout.fileno(), 65536)
            check(chunk, "parley acp closed stdout", self.buf)
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def until(self, pred, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            m = self.read(max(0.1, deadline - time.monotonic()))
            if pred(m):
                return m

    def call(self, id_, method, params):
        self.send({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
        return self.until(lambda m: m.get("id") == id_ and "method" not in m)

    def close(self):
        """stdin's end: it must exit 0."""
        self.p.stdin.close()
        try:
            rc = self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = "no exit"
        check(rc == 0, "parley acp exits 0 at stdin's end", rc)


def malformed(cmd):
    r = Raw(cmd)
    try:
        err = lambda m: m.get("error", {}).get("code")  # noqa: E731
        r.send(b"this is not json")
        m = r.read()
        check(err(m) == -32700 and m["id"] is None, "bad JSON: -32700", m)
        r.send(b'{"jsonrpc":"1.0","id":1,"method":"initialize"}')
        check(err(r.read()) == -32600, "not JSON-RPC 2.0: -32600")
        check(err(r.call(2, "no/such", {})) == -32601, "unknown method: -32601")
        check(err(r.call(3, "session/new", {"cwd": 5})) == -32602, "bad params: -32602")
        check(err(r.call(4, "session/prompt", {"sessionId": "x", "prompt": "hi"})) == -32602,
              "a prompt that is not a list: -32602")
        r.send(b'{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"x":"' +
               b"a" * (17 << 20) + b'"}}')
        m = r.read()
        check(err(m) == -32600 and "longer" in m["error"]["message"], "a line over the bound", m)
        m = r.call(6, "session/load", {"sessionId": "0" * 32, "cwd": TMP, "mcpServers": []})
        check(err(m) == -32002 and "no conversation" in m["error"]["message"],
              "an unknown session id: -32002, clearly", m)
        m = r.call(7, "initialize", {"protocolVersion": 1})
        check(m.get("result", {}).get("protocolVersion") == 1, "serves on after all that", m)
    finally:
        r.close()


def other_client(srv):
    """A message another client posts shows in the editor as it comes."""
    r = Raw([PARLEY, "acp", "--url", srv.url()])
    try:
        r.call(1, "initialize", {"protocolVersion": 1})
        sid = r.call(2, "session/new", {"cwd": TMP, "mcpServers": []})["result"]["sessionId"]
        srv.client().expect("POST", "/api/conversations/%s/events" % sid, 200,
                            {"role": "user", "content": [{"type": "text", "text": "from the web"}],
                             "run": False})
        m = r.until(lambda m: m.get("method") == "session/update")
        u = m["params"]["update"]
        check(m["params"]["sessionId"] == sid and u["sessionUpdate"] == "user_message_chunk" and
              u["content"]["text"] == "from the web", "the other client's message", m)
    finally:
        r.close()


def not_reading(srv):
    """An editor that stops reading: past --max-pending its conversation is
    cut off (said on stderr, its prompt fails), not held in memory; once
    the editor reads again the process serves on and exits 0 at EOF."""
    err = os.path.join(TMP, "raw.err")
    before = os.path.getsize(err) if os.path.exists(err) else 0
    r = Raw([PARLEY, "acp", "--url", srv.url(), "--max-pending", "64K"])
    try:
        r.call(1, "initialize", {"protocolVersion": 1})
        sid = r.call(2, "session/new", {"cwd": TMP, "mcpServers": []})["result"]["sessionId"]
        c = srv.client()
        big = "x" * 20000
        for n in range(100):  # 2 MB of updates; the editor reads none of them
            c.expect("POST", "/api/conversations/%s/events" % sid, 200,
                     {"role": "user", "content": [{"type": "text", "text": "%d %s" % (n, big)}],
                      "run": False})

        def said():
            with open(err, "rb") as f:
                f.seek(before)
                return b"the editor is not reading" in f.read()
        wait_for("parley acp to cut the conversation off", said)
        # the editor reads again: what was held before the cut, then the answer
        got = []
        r.send({"jsonrpc": "2.0", "id": 9, "method": "initialize",
                "params": {"protocolVersion": 1}})
        m = r.until(lambda m: got.append(m) or m.get("id") == 9, timeout=60)
        check(m.get("result", {}).get("protocolVersion") == 1, "serves on", m)
        check(len(got) - 1 < 100, "the updates past the bound were not kept", len(got))
    finally:
        r.close()


def permission(cmd, option):
    """A conversation that waits for confirmation asks the editor (sessions
    made by parley acp ask by default); its answer (allow, reject) is what
    the hosted agent hears."""
    r = Raw(cmd + ["--agent", "permission"])
    try:
        r.call(1, "initialize", {"protocolVersion": 1})
        sid = r.call(2, "session/new", {"cwd": TMP, "mcpServers": []})["result"]["sessionId"]
        r.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "clean up"}]}})
        ask = r.until(lambda m: m.get("method") == "session/request_permission")
        call = ask["params"]["toolCall"]
        check(call["toolCallId"] == "call-1-1" and call["title"] == "$ rm -rf build",
              "the call to confirm", ask)
        r.send({"jsonrpc": "2.0", "id": ask["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": option}}})
        seen = []
        end = r.until(lambda m: seen.append(m) or m.get("id") == 3)
        check(end.get("result") == {"stopReason": "end_turn"}, "the turn ends", end)
        text = "".join(m["params"]["update"]["content"]["text"] for m in seen
                       if m.get("method") == "session/update" and
                       m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        want = {"allow": "allowed", "reject": ""}[option]
        check(text == want, "the agent heard the editor's answer", text, seen)
        res = [m["params"]["update"] for m in seen if m.get("method") == "session/update" and
               m["params"]["update"]["sessionUpdate"] == "tool_call_update"]
        check(res and res[-1]["status"] == ("completed" if option == "allow" else "failed"),
              "the call's result", res)
    finally:
        r.close()


def always_approve(cmd):
    """--always-approve: the hosted agent's permission request is allowed
    without a word to the editor."""
    summ, msgs, _ = sdk_client(cmd + ["--agent", "permission", "--always-approve"],
                               "--prompt", "clean up")
    check(summ["ok"], "the SDK client found errors", summ["errors"])
    check(not any(m.get("method") == "session/request_permission" for m in msgs[1]),
          "the editor is not asked", msgs[1])
    t = summ["turns"][0]
    check(t["stopReason"] == "end_turn" and t["text"] == "allowed" and
          t["toolCalls"] == {"call-1-1": "completed"}, "allowed", t)


# A prompt of every kind of block the core declares (promptCapabilities
# image and embeddedContext), and what the conversation keeps of each.
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
       "rkJggg==")
GIF = "R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="
BLOCKS = [
    {"type": "text", "text": "look at these"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "resource_link", "name": "main.c", "uri": "file:///w/main.c"},
    {"type": "resource", "resource": {"uri": "file:///w/a.h", "text": "int a;\n",
                                      "mimeType": "text/x-c"}},
    {"type": "resource", "resource": {"uri": "file:///w/dot.gif", "blob": GIF,
                                      "mimeType": "image/gif"}},
    {"type": "resource", "resource": {"uri": "file:///w/a.bin", "blob": "AAECAw==",
                                      "mimeType": "application/octet-stream"}},
]
CARRIED = [  # the MessageEvent's content (OpenHands: TextContent, ImageContent)
    {"type": "text", "text": "look at these"},
    {"type": "image", "image_urls": ["data:image/png;base64," + PNG]},
    {"type": "text", "text": "@file:///w/main.c"},
    {"type": "text", "text": '<context ref="file:///w/a.h">\nint a;\n\n</context>'},
    {"type": "image", "image_urls": ["data:image/gif;base64," + GIF]},
    {"type": "text", "text": "@file:///w/a.bin"},
]
REPLAYED = [  # what session/load gives the editor back for it
    {"type": "text", "text": "look at these"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "text", "text": "@file:///w/main.c"},
    {"type": "text", "text": '<context ref="file:///w/a.h">\nint a;\n\n</context>'},
    {"type": "image", "data": GIF, "mimeType": "image/gif"},
    {"type": "text", "text": "@file:///w/a.bin"},
]


def blocks(cmd, srv=None):
    """Images carried whole (a data: URL each, as OpenHands' ImageContent),
    embedded text inlined, links and other blobs named; not echoed live;
    replayed as the conversation keeps them; the hosted agent hears them
    (the demo agent repeats its prompt's texts and links)."""
    summ, msgs, _ = sdk_client(cmd, "--prompt-json", json.dumps(BLOCKS), "--load")
    check(summ["ok"], "the SDK client found errors", summ["errors"])
    t = summ["turns"][0]
    check(t["stopReason"] == "end_turn", "the turn ends", t)
    check(not any(u["sessionUpdate"] == "user_message_chunk" for u in updates(msgs[1])),
          "the editor's own prompt is not echoed back", updates(msgs[1]))
    said = [u["content"] for u in updates(msgs[2]) if u["sessionUpdate"] == "user_message_chunk"]
    check(said == REPLAYED, "the replay of the prompt", json.dumps(said)[:800])
    check(t["text"].startswith("You said: look at these\ndata:image/png;base64," + PNG +
                               "\n@file:///w/main.c\n<context"), "what the agent heard", t)
    if srv is not None:
        evs = srv.client().expect("GET", "/api/conversations/%s/events/search?limit=100"
                                  % summ["sessionId"], 200)["items"]
        kept = [e["llm_message"]["content"] for e in evs if e["kind"] == "MessageEvent" and
                e["source"] == "user"]
        check(kept == [CARRIED], "the conversation keeps each block", json.dumps(kept)[:800])


def editor_leaves(cmd, status_of):
    """stdin's end while a turn runs: the turn is paused (its prompt
    answered cancelled), the process exits 0 soon, and the conversation's
    log says paused, not running with nobody to ask. status_of(sid): the
    conversation's execution_status once the process is gone."""
    r = Raw(cmd)
    r.call(1, "initialize", {"protocolVersion": 1})
    sid = r.call(2, "session/new", {"cwd": TMP, "mcpServers": []})["result"]["sessionId"]
    r.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slowly"}]}})
    r.until(lambda m: m.get("method") == "session/update")
    t0 = time.monotonic()
    r.p.stdin.close()
    end = r.until(lambda m: m.get("id") == 3)
    check(end.get("result") == {"stopReason": "cancelled"}, "the turn answered cancelled", end)
    try:
        rc = r.p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        r.p.kill()
        r.p.wait()
        rc = "no exit"
    check(rc == 0, "parley acp exits 0 at stdin's end", rc)
    check(time.monotonic() - t0 < 10, "and soon", time.monotonic() - t0)
    st = status_of(sid)
    check(st == "paused", "the conversation is paused", st)


def status_on(srv):
    return lambda sid: srv.client().expect("GET", "/api/conversations/%s" % sid,
                                           200)["execution_status"]


def status_in(data):
    """The status in a data directory: served for a moment."""
    def get(sid):
        with serving("serve_%s_stops" % os.path.basename(data), data=data) as srv:
            return status_on(srv)(sid)
    return get


def cwd(cmd, here):
    """The editor's cwd: with --data the hosted agent works there (the demo
    agent writes notes.md in its session's cwd, through parley's fs); with
    --url it is the server's business, and parley serve keeps the agent in
    a directory of its own (here=False)."""
    summ, _, _ = sdk_client(cmd, "--prompt", "where am I")
    check(summ["ok"], "the SDK client found errors", summ["errors"])
    notes = os.path.join(summ["cwd"], "notes.md")
    if here:
        check(os.path.exists(notes) and "where am I" in open(notes).read(),
              "the agent worked in the editor's cwd", os.listdir(summ["cwd"]))
    else:
        check(not os.path.exists(notes), "the server's agent worked elsewhere",
              os.listdir(summ["cwd"]))


def api_key():
    """A server with a key: parley acp works with it, and without it says
    so clearly (the editor sees why session/new failed)."""
    with serving("serve_keyed_stops", api_key="s3cret",
                 args=["--agent", DEMO, "--default-agent", "demo"]) as srv:
        url = "http://127.0.0.1:%d" % srv.port
        summ, msgs, _ = sdk_client([PARLEY, "acp", "--url", url, "--api-key", "s3cret"],
                                   "--prompt", "with a key", "--load")
        check_turns(summ, msgs, ["with a key"])
        for args in ([], ["--api-key", "wrong"]):
            r = Raw([PARLEY, "acp", "--url", url] + args)
            try:
                m = r.call(1, "session/new", {"cwd": TMP, "mcpServers": []})
                msg = m.get("error", {}).get("message", "")
                want = "wants an API key" if not args else "refused the API key"
                check("401" in msg and want in msg and "--api-key" in msg,
                      "a clear error without the right key", args, m)
            finally:
                r.close()


def https():
    """An https server: parley acp checks its certificate against
    --ca-file and works; without it, an error says what failed."""
    d = tempfile.mkdtemp(dir=TMP)
    key, cert = os.path.join(d, "k.pem"), os.path.join(d, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    with serving("serve_tls_stops", args=["--agent", DEMO, "--default-agent", "demo",
                                          "--tls-cert", cert, "--tls-key", key]) as srv:
        url = "https://127.0.0.1:%d" % srv.port
        summ, msgs, _ = sdk_client([PARLEY, "acp", "--url", url, "--ca-file", cert],
                                   "--prompt", "over tls", "--load")
        check_turns(summ, msgs, ["over tls"])
        r = Raw([PARLEY, "acp", "--url", url])
        try:
            m = r.call(1, "session/new", {"cwd": TMP, "mcpServers": []})
            msg = m.get("error", {}).get("message", "")
            check("certificate" in msg, "an unverified server: said", m)
        finally:
            r.close()


def main():
    t0 = time.monotonic()
    try:
        with serving("serve_stops", args=["--agent", DEMO, "--agent", SLOW,
                                          "--agent", "permission=node %s permission" % AGENT,
                                          "--default-agent", "demo"]) as srv:
            srv.url = lambda: "http://127.0.0.1:%d" % srv.port
            url = [PARLEY, "acp", "--url", srv.url()]
            run("url_turns_and_load", turns_url, srv)
            run("url_cancel", cancel, url + ["--agent", "slow"])
            run("url_malformed", malformed, url)
            run("url_other_client", other_client, srv)
            run("url_not_reading", not_reading, srv)
            run("url_permission_allow", permission, url, "allow")
            run("url_permission_reject", permission, url, "reject")
            run("url_always_approve", always_approve, url)
            run("url_blocks", blocks, url, srv)
            run("url_editor_leaves", editor_leaves, url + ["--agent", "slow"], status_on(srv))
            run("url_cwd", cwd, url, False)
        run("url_api_key", api_key)
        run("url_https", https)
        run("data_turns_and_load", turns_data)
        run("data_cancel", cancel, [PARLEY, "acp", "--data", tempfile.mkdtemp(dir=TMP),
                                    "--agent", SLOW])
        run("data_malformed", malformed, [PARLEY, "acp", "--data", tempfile.mkdtemp(dir=TMP),
                                          "--agent", DEMO])
        agents = ["--agent", DEMO, "--agent", "permission=node %s permission" % AGENT,
                  "--default-agent", "demo"]
        data = [PARLEY, "acp", "--data", tempfile.mkdtemp(dir=TMP)] + agents
        run("data_permission_allow", permission, data, "allow")
        run("data_permission_reject", permission, data, "reject")
        run("data_always_approve", always_approve, data)
        run("data_blocks", blocks, data)
        d = tempfile.mkdtemp(dir=TMP)
        run("data_editor_leaves", editor_leaves, [PARLEY, "acp", "--data", d, "--agent", SLOW],
            status_in(d))
        run("data_cwd", cwd, data, True)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    return summary(t0)


if __name__ == "__main__":
    sys.exit(main())
