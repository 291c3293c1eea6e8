#!/usr/bin/python3
"""agent_routes_test.py - the conversation routes about its agent, on a real
`parley serve` hosting real ACP agents (tests/node/acp_agent.mjs): secrets
(given to the agent, masked in what it says, never stored or answered),
confirmation_policy (live), security_analyzer, agent_final_response,
generate_title, fork, navigate, and the routes an ACP agent cannot honour
(422 saying why, 404 for an unknown conversation, never a 404 route).

Run by test_agent_routes.sh (ctest sets $PARLEY). Every log a test leaves
is checked with `parley lint`.
"""

import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from acp_host_test import (agent_args, agent_says, conv_path, events, hosted, lint,  # noqa: E402
                           of_kind, say, settle, summarize, text)
from parley_client import check, run, serving, summary  # noqa: E402

SECRET = "s3cr3t-Value-4417"
SECRET2 = "other-Secret-9931"
UNKNOWN = "/api/conversations/00000000-0000-4000-8000-000000000000"


def everything_under(path):
    out = b""
    for root, _, files in os.walk(path):
        for f in files:
            try:
                with open(os.path.join(root, f), "rb") as fh:
                    out += fh.read()
            except OSError:
                pass
    return out


def secrets(srv, c):
    cid = hosted(c, "secrets", "MY_TOKEN", secrets={"MY_TOKEN": SECRET})
    evs = settle(c, cid)
    says = agent_says(evs)
    check(says == ["the value is <secret-hidden>"], "the agent had it, and it is masked", says)
    raw = repr(evs)
    check(SECRET not in raw and raw.count("<secret-hidden>") >= 4,
          "masked in the thought, the call, its output and the message", summarize(evs))
    info = c.expect("GET", conv_path(cid), 200)
    check(SECRET not in repr(info) and "MY_TOKEN" in repr(info.get("secrets")),
          "the info names it, without its value", info.get("secrets"))
    # set through the route, before the agent's process starts
    later = hosted(c, "secrets")
    c.expect("POST", conv_path(later, "/secrets"), 200,
             {"secrets": {"OTHER": {"value": SECRET2}, "MORE": {"kind": "StaticSecret",
                                                                "value": "x" + SECRET2}}})
    say(c, later, "OTHER")
    evs = settle(c, later)
    check(agent_says(evs) == ["the value is <secret-hidden>"] and SECRET2 not in repr(evs),
          "a secret set by the route: given and masked", summarize(evs))
    lint(c, later)
    for body, why in (({"secrets": {"1BAD": "x"}}, "letters"),
                      ({"secrets": {"K": {"kind": "LookupSecret", "url": "http://x"}}},
                       "not supported"),
                      ({"secrets": {"K": 5}}, "string"),
                      ({"secrets": "K=v"}, "object")):
        r = c.request("POST", conv_path(cid, "/secrets"), body)
        check(r.status == 422 and why in r.body["detail"], "%r: 422 saying why" % body, r)
    r = c.request("POST", UNKNOWN + "/secrets", {"secrets": {"K": "v"}})
    check(r.status == 404, "an unknown conversation: 404", r)
    r = c.request("POST", "/api/conversations", {"secrets": {"no way": "x"}})
    check(r.status == 422, "a bad secret on create: 422", r)
    lint(c, cid)
    on_disk = everything_under(srv.data)
    check(SECRET.encode() not in on_disk and SECRET2.encode() not in on_disk,
          "no secret under the data directory")


def confirmation_policy(c):
    cid = hosted(c, "permission")
    c.expect("POST", conv_path(cid, "/confirmation_policy"), 200,
             {"policy": {"kind": "AlwaysConfirm"}})
    info = c.expect("GET", conv_path(cid), 200)
    check(info["confirmation_policy"] == {"kind": "AlwaysConfirm"}, "in the info", info)
    say(c, cid, "clean up")
    evs = settle(c, cid, ("waiting_for_confirmation",))
    ups = [e for e in evs if e.get("key") == "confirmation_policy"]
    check(len(ups) == 1 and ups[0]["value"] == {"kind": "AlwaysConfirm"},
          "announced in the log", summarize(evs))
    c.expect("POST", conv_path(cid, "/events/respond_to_confirmation"), 200, {"accept": True})
    evs = settle(c, cid)
    check(agent_says(evs) == ["allowed"], "confirmed, then done", summarize(evs))
    # back to never: the next call goes through unasked
    c.expect("POST", conv_path(cid, "/confirmation_policy"), 200,
             {"policy": {"kind": "ConfirmRisky", "confirm_unknown": False}})
    say(c, cid, "again")
    evs = settle(c, cid)
    check(agent_says(evs)[-1] == "allowed", "ConfirmRisky without confirm_unknown: unasked",
          summarize(evs))
    for body in ({"policy": {"kind": "Sometimes"}}, {"policy": "AlwaysConfirm"}, {},
                 {"policy": {"kind": "ConfirmRisky", "threshold": "EXTREME"}}):
        r = c.request("POST", conv_path(cid, "/confirmation_policy"), body)
        check(r.status == 422, "%r: 422" % body, r)
    r = c.request("POST", UNKNOWN + "/confirmation_policy", {"policy": {"kind": "NeverConfirm"}})
    check(r.status == 404, "unknown conversation: 404", r)
    lint(c, cid)


def security_analyzer(c):
    cid = hosted(c, "echo")
    c.expect("POST", conv_path(cid, "/security_analyzer"), 200,
             {"security_analyzer": {"kind": "LLMSecurityAnalyzer"}})
    info = c.expect("GET", conv_path(cid), 200)
    check(info["security_analyzer"] == {"kind": "LLMSecurityAnalyzer"}, "recorded", info)
    c.expect("POST", conv_path(cid, "/security_analyzer"), 200, {"security_analyzer": None})
    r = c.request("POST", conv_path(cid, "/security_analyzer"), {"security_analyzer": 3})
    check(r.status == 422, "not an analyzer: 422", r)
    lint(c, cid)


def final_response_and_title(c):
    long = "please fix the typo in the readme and then run every test again"
    cid = hosted(c, "full", long)
    c.expect("GET", conv_path(cid, "/agent_final_response"), 200)  # whatever it is by now
    settle(c, cid)
    r = c.expect("GET", conv_path(cid, "/agent_final_response"), 200)
    check(r == {"response": "I listed the files and fixed the typo in file1.txt."},
          "the agent's last message", r)
    r = c.expect("POST", conv_path(cid, "/generate_title"), 200, {"max_length": 20})
    check(r == {"title": long[:17] + "..."}, "upstream's title without an LLM", r)
    r = c.expect("POST", conv_path(cid, "/generate_title"), 200)
    check(r == {"title": long[:47] + "..."}, "50 by default", r)
    empty = hosted(c, "echo")
    check(c.expect("GET", conv_path(empty, "/agent_final_response"), 200) == {"response": ""},
          "nothing said yet: empty")
    r = c.request("POST", conv_path(empty, "/generate_title"), {})
    check(r.status == 409, "no user message: 409 saying so", r)
    r = c.request("POST", conv_path(cid, "/generate_title"), {"max_length": 0})
    check(r.status == 422, "a bad max_length: 422", r)
    r = c.request("GET", UNKNOWN + "/agent_final_response")
    check(r.status == 404, "unknown: 404", r)
    lint(c, cid)


def fork(c):
    cid = hosted(c, "full", "fix the typo", title="the source", tags={"team": "a"})
    src = settle(c, cid)
    info = c.expect("POST", conv_path(cid, "/fork"), 201, {})
    fid = info["id"]
    check(fid != cid and info["forked_from_conversation_id"] == cid and
          info["execution_status"] == "idle", "a new conversation forked from the source, idle",
          info)
    check(info["tags"] == {"team": "a"} and info.get("title") is None and
          info["agent"]["acp_command"] == ["full"], "its tags and agent, no title", info)
    fevs = events(c, fid)
    strip = [e["id"] for e in src if e.get("key") != "execution_status"]
    check([e["id"] for e in fevs] == strip, "the source's events, less status changes",
          summarize(fevs))
    # from an event: up to and including it
    act = of_kind(src, "ActionEvent")[0]
    info = c.expect("POST", conv_path(cid, "/fork"), 201,
                    {"from_event_id": act["id"], "title": "a branch", "tags": {"team": "b"}})
    fevs = events(c, info["id"])
    check(fevs[-1]["id"] == act["id"] and info["forked_from_event_id"] == act["id"] and
          info["title"] == "a branch" and info["tags"] == {"team": "b"},
          "a prefix, with its own title and tags", summarize(fevs))
    lint(c, info["id"])
    # the errors
    r = c.request("POST", conv_path(cid, "/fork"), {"id": fid})
    check(r.status == 409 and "already exists" in r.body["detail"], "an id taken: 409", r)
    r = c.request("POST", conv_path(cid, "/fork"), {"from_event_id": "nope"})
    check(r.status == 404 and "from_event_id" in r.body["detail"], "an unknown event: 404", r)
    r = c.request("POST", UNKNOWN + "/fork", {})
    check(r.status == 404, "an unknown source: 404", r)
    r = c.request("POST", conv_path(cid, "/fork"), {"id": "x"})
    check(r.status == 422, "a bad id: 422", r)
    lint(c, fid)
    # a hosted fork answers what comes after the copy, and nothing before
    src = hosted(c, "echo", "first")
    settle(c, src)
    say(c, src, "second")
    settle(c, src)
    fork2 = c.expect("POST", conv_path(src, "/fork"), 201, {})["id"]
    check(c.expect("GET", conv_path(fork2), 200)["agent"]["acp_command"] == ["echo"],
          "the fork hosts the source's agent")
    say(c, fork2, "third")
    evs = settle(c, fork2)
    check(agent_says(evs) == ["first", "second", "third"],
          "the fork's agent answered only the new message", summarize(evs))
    lint(c, fork2)


def navigate(c):
    cid = hosted(c, "full", "fix the typo")
    evs = settle(c, cid)
    head = [e for e in evs if e["kind"] != "ConversationStateUpdateEvent"][-1]
    info = c.expect("POST", conv_path(cid, "/navigate"), 200, {"event_id": head["id"]})
    check(info["id"] == cid, "to the head: the info", info)
    r = c.request("POST", conv_path(cid, "/navigate"), {"event_id": evs[0]["id"]})
    check(r.status == 422 and "fork" in r.body["detail"], "back: 422, fork instead", r)
    r = c.request("POST", conv_path(cid, "/navigate"), {"event_id": None})
    check(r.status == 422, "to the empty tree: 422", r)
    r = c.request("POST", conv_path(cid, "/navigate"), {"event_id": "nope"})
    check(r.status == 404, "an unknown event: 404", r)


def cannot(c):
    cid = hosted(c, "echo")
    for route, body in (("/ask_agent", {"question": "why?"}), ("/condense", None),
                        ("/goal", {"objective": "x"}), ("/goal/stop", None),
                        ("/goal/resume", None), ("/switch_llm", {"llm": {}}),
                        ("/switch_profile", {"profile_name": "p"}),
                        ("/load_plugin", {"plugin_ref": "p"}),
                        ("/switch_acp_model", {"model": "m"})):
        r = c.request("POST", conv_path(cid, route), body)
        check(r.status == 422 and len(r.body["detail"]) > 20, "%s: 422 saying why" % route, r)
        r = c.request("POST", UNKNOWN + route, body)
        check(r.status == 404, "%s of an unknown conversation: 404" % route, r)


def main():
    t0 = time.monotonic()
    with serving("server_stops_cleanly", args=agent_args()) as srv:
        c = srv.client()
        run("secrets", secrets, srv, c)
        for fn in (confirmation_policy, security_analyzer, final_response_and_title, fork,
                   navigate, cannot):
            run(fn.__name__, fn, c)
        log = srv._stderr_text(0)
        run("no_secret_in_the_server_log",
            lambda: check(SECRET not in log and SECRET2 not in log, "the log is clean"))
    return summary(t0)


if __name__ == "__main__":
    sys.exit(main())
