#!/usr/bin/python3
"""secrets_test.py - a secret given to parley never comes back, anywhere.

A conversation is created with an agent whose LLM (and whose condenser's
LLM) carries an api_key and AWS keys, and with named secrets; then every
route that shows a conversation is asked (create, get, batch get, search,
the WebSocket full_state, server_info, /metrics), its title patched, events
appended and searched, the server restarted and asked again, with debug
logging on. Then every answer, every log line and every file under the data
directory is searched for each secret value: none may be found, in plain
text or base64. What is kept is the names, with the value upstream shows
for a redacted secret ("**********"). Standard library only.
"""

import base64
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, check, store  # noqa: E402
from ws_raw import Reader, handshake  # noqa: E402

SECRETS = {
    "llm api_key": "sk-parley-TOPSECRET-0001",
    "aws_access_key_id": "AKIAPARLEYSECRET0002",
    "aws_secret_access_key": "wJalrXUtnFEMI/PARLEY/SECRET0003",
    "condenser api_key": "sk-condenser-SECRET-0004",
    "named secret": "ghp_parleyNAMEDsecret0005",
}
REDACTED = "**********"


def create_body():
    return {
        "title": "has secrets",
        "agent": {
            "kind": "Agent",
            "llm": {"model": "gpt-4o", "api_key": SECRETS["llm api_key"],
                    "aws_access_key_id": SECRETS["aws_access_key_id"],
                    "aws_secret_access_key": SECRETS["aws_secret_access_key"],
                    "usage_id": "agent"},
            "condenser": {"kind": "LLMSummarizingCondenser",
                          "llm": {"model": "gpt-4o-mini",
                                  "api_key": SECRETS["condenser api_key"]}},
        },
        "secrets": {"GITHUB_TOKEN": SECRETS["named secret"]},
    }


def leaks(blob, where):
    """The secrets found in blob (bytes), by name."""
    found = []
    for name, value in SECRETS.items():
        for form in (value.encode(), base64.b64encode(value.encode())):
            if form in blob:
                found.append("%s in %s" % (name, where))
    return found


def ws_full_state(port, cid):
    s, rest = handshake(port, "/sockets/events/%s?resend_all=true" % cid)
    r = Reader(s, rest)
    op, payload = r.next()
    s.close()
    check(op == 1, "the first frame is text", op)
    return payload


def main():
    answers = []
    with Server(args=["--log-level", "debug"]) as srv:
        c = srv.client()
        r = c.request("POST", "/api/conversations", body=create_body())
        check(r.status == 201, "create: 201", r)
        answers.append(("create", r.raw))
        info = r.body
        cid = info["id"]
        llm = info["agent"]["llm"]
        check(llm["api_key"] == REDACTED and llm["aws_access_key_id"] == REDACTED
              and llm["aws_secret_access_key"] == REDACTED, "the keys are shown redacted", llm)
        check(info["agent"]["condenser"]["llm"]["api_key"] == REDACTED,
              "a nested LLM's key too", info["agent"])
        check(info["secrets"] == {"GITHUB_TOKEN": REDACTED}, "named secrets keep their names",
              info.get("secrets"))
        check(llm["model"] == "gpt-4o" and llm["usage_id"] == "agent", "the rest is kept", llm)
        for what, path in (("get", "/api/conversations/%s" % cid),
                           ("batch", "/api/conversations?ids=%s" % cid),
                           ("search", "/api/conversations/search"),
                           ("server_info", "/server_info"), ("metrics", "/metrics")):
            r = c.request("GET", path)
            check(r.status == 200, "%s: 200" % what, r)
            answers.append((what, r.raw))
        c.expect("PATCH", "/api/conversations/%s" % cid, 200, {"title": "renamed"})
        ev = {"source": "user", "kind": "MessageEvent",
              "llm_message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}}
        c.expect("POST", "/api/conversations/%s/events/append" % cid, 201, ev)
        answers.append(("events", c.request(
            "GET", "/api/conversations/%s/events/search" % cid).raw))
        answers.append(("full_state", ws_full_state(srv.port, cid)))
        srv.restart()
        c = srv.client()
        r = c.request("GET", "/api/conversations/%s" % cid)
        check(r.status == 200 and r.body["title"] == "renamed"
              and r.body["agent"]["llm"]["api_key"] == REDACTED,
              "after a restart: redacted still, the change kept", r)
        answers.append(("get after restart", r.raw))
        answers.append(("full_state after restart", ws_full_state(srv.port, cid)))
        srv.stop()
        found = []
        for what, blob in answers:
            found += leaks(blob, what)
        found += leaks(srv.log_text.encode(), "the log")
        check("store opened" in srv.log_text, "the log was read", srv.log_text[:200])
        files = 0
        # on a NATS cluster (PARLEY_STORE), what it stored is the servers'
        # JetStream files (plain bytes on 2.9), under nats_cluster.py's dir
        tops = [srv.data] + ([os.environ["PARLEY_NATS_DIR"]] if store() else [])
        for top in tops:
            for root, _, names in os.walk(top):
                for f in names:
                    path = os.path.join(root, f)
                    with open(path, "rb") as fh:
                        found += leaks(fh.read(), os.path.relpath(path, top))
                    files += 1
        check(files >= 3, "the data directory was read", files)
        check(not found, "no secret anywhere", found)
    print("ok secrets_never_leave")
    return 0


if __name__ == "__main__":
    sys.exit(main())
