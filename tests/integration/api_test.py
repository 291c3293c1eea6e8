#!/usr/bin/python3
"""api_test.py - every REST route of `parley serve`, against a real server.

Run by test_api.sh (ctest sets $PARLEY to the binary under test; the shared
test vectors are read from $PARLEY_SHARED_DIR/vectors, default
../shared/vectors next to the repository). Standard library only.

Each check is a function named after the behaviour it pins down; they run in
order, each printing `ok <name>` or `FAIL <name>: why`, and the run fails if
any failed. Checks of behaviour the server lacked when this suite was
written are listed in SERVER_BUGS (grep for it): they test the correct
behaviour and fail until the server is fixed.

Timestamps: the servers and this script run with TZ at UTC+05:30, so that
the tz-aware timestamp filters are really converted to server-local time.
"""

import http.client
import json
import os
import re
import select
import sys
import time
import uuid
from datetime import datetime, timezone
from urllib.parse import urlencode

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import (SERVER_BUGS, Server, TestFailure, check, run,  # noqa: E402
                           serving, store, summary, wait_for)

os.environ["TZ"] = "PLY-05:30"  # POSIX: local time is UTC+05:30; needs no tzdata
time.tzset()

# Server bugs this suite found (test name -> the bug as first seen). Such a
# test checks the correct behaviour; while it fails, its FAIL line quotes the
# bug. Drop the entry once the fix is committed.
SERVER_BUGS.update({})

UUID_DASHED = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
HEX32 = re.compile(r"^[0-9a-f]{32}$")
NAIVE_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?$")
Q = "openhands.sdk.event.llm_convertible."
QUALIFIED = {
    "MessageEvent": Q + "message.MessageEvent",
    "ActionEvent": Q + "action.ActionEvent",
    "ObservationEvent": Q + "observation.ObservationEvent",
}

# ---------------------------------------------------------------- events ---


def text(t):
    return [{"cache_prompt": False, "type": "text", "text": t}]


def user_msg(eid=None, say="hello", source="user", **kw):
    e = {"source": source,
         "llm_message": {"role": "user", "content": text(say), "thinking_blocks": []},
         "activated_skills": [], "extended_content": [], "kind": "MessageEvent"}
    if eid is not None:
        e["id"] = eid
    e.update(kw)
    return e


def agent_msg(eid, say="done", resp="r-msg", **kw):
    e = {"id": eid, "source": "agent",
         "llm_message": {"role": "assistant", "content": text(say), "thinking_blocks": []},
         "llm_response_id": resp, "activated_skills": [], "extended_content": [],
         "kind": "MessageEvent"}
    e.update(kw)
    return e


def action(eid, call, resp, cmd="ls", **kw):
    e = {"id": eid, "source": "agent", "thought": [], "thinking_blocks": [],
         "action": {"command": cmd, "is_input": False, "reset": False, "kind": "TerminalAction"},
         "tool_name": "terminal", "tool_call_id": call,
         "tool_call": {"id": call, "name": "terminal",
                       "arguments": json.dumps({"command": cmd}), "origin": "completion"},
         "llm_response_id": resp, "security_risk": "UNKNOWN", "kind": "ActionEvent"}
    e.update(kw)
    return e


def observation(eid, call, out="file1.txt", **kw):
    e = {"id": eid, "source": "environment", "tool_name": "terminal", "tool_call_id": call,
         "observation": {"content": text(out), "is_error": False, "command": "ls",
                         "exit_code": 0, "timeout": False, "kind": "TerminalObservation"},
         "action_id": "act-" + call, "extended_content": [], "kind": "ObservationEvent"}
    e.update(kw)
    return e


def agent_error(eid, call):
    return {"id": eid, "source": "agent", "tool_name": "terminal", "tool_call_id": call,
            "error": "Tool 'terminal' got invalid arguments",
            "classification": {"kind": "agent_action", "retryable": True,
                               "user_action": "retry"},
            "kind": "AgentErrorEvent"}


def user_reject(eid, call):
    return {"id": eid, "source": "environment", "tool_name": "terminal", "tool_call_id": call,
            "rejection_reason": "Not now", "rejection_source": "user",
            "action_id": "act-" + call, "kind": "UserRejectObservation"}


# ----------------------------------------------------------- API helpers ---


def conv_path(cid, rest=""):
    return "/api/conversations/" + cid + rest


def new_conv(c, **body):
    info = c.expect("POST", "/api/conversations", 201, body)
    check(UUID_DASHED.match(info.get("id", "")), "created conversation has no dashed id", info)
    return info["id"]


def append(c, cid, ev, want=201):
    """POST .../events/append, checking the status; -> the body."""
    return c.expect("POST", conv_path(cid, "/events/append"), want, ev)


def refused(c, cid, ev, rule, pending=None):
    """Append ev; it must be refused with 409 naming rule (and these pending calls)."""
    b = append(c, cid, ev, 409)
    note_refused(cid, ev)
    check(isinstance(b, dict) and b.get("rule") == rule and isinstance(b.get("detail"), str),
          "want a 409 naming rule %s" % rule, b)
    check(b.get("event_id") == ev.get("id"), "409 must name the refused event", b)
    check(isinstance(b.get("pending_tool_call_ids"), list), "409 lacks pending_tool_call_ids", b)
    if pending is not None:
        check(sorted(b["pending_tool_call_ids"]) == sorted(pending),
              "409 pending_tool_call_ids: want %s" % sorted(pending), b)
    return b


def all_events(c, cid, limit=100, order=None, **filters):
    """Every event of the search, page by page (checking the cursor rules)."""
    items, page, seen_pages = [], None, 0
    while True:
        q = {"limit": str(limit)}
        q.update(filters)
        if order:
            q["sort_order"] = order
        if page:
            q["page_id"] = page
        b = c.expect("GET", conv_path(cid, "/events/search?" + qs(q)), 200)
        check(set(b) == {"items", "next_page_id"}, "search answers {items, next_page_id}", b)
        check(len(b["items"]) <= limit, "a page holds at most limit items", len(b["items"]))
        items += b["items"]
        page = b["next_page_id"]
        seen_pages += 1
        check(seen_pages < 10000, "search paging does not end")
        if page is None:
            return items
        check(len(b["items"]) == limit, "a page before the last must be full",
              len(b["items"]), limit)


def log_ids(c, cid):
    return [e["id"] for e in all_events(c, cid)]


def event_count(c, cid, **filters):
    r = c.request("GET", conv_path(cid, "/events/count" + ("?" + qs(filters) if filters else "")))
    check(r.status == 200 and re.match(rb"^\d+$", r.raw), "count must be a bare integer", r)
    return int(r.raw)


def qs(params):
    return urlencode(params, doseq=True)


def status_of(c, cid):
    return c.expect("GET", conv_path(cid), 200)["execution_status"]


def utc_form(local_ts, suffix):
    """A naive server-local timestamp as the same instant in UTC, with suffix."""
    d = datetime.fromisoformat(local_ts).astimezone(timezone.utc)
    s = d.strftime("%Y-%m-%dT%H:%M:%S.%f" if "." in local_ts else "%Y-%m-%dT%H:%M:%S")
    return s + suffix


# ------------------------------------------------------------ 1. open routes ---


def alive_health_ready_info(c):
    for p in ("/alive", "/health"):
        check(c.expect("GET", p, 200) == {"status": "ok"}, p + " answers {status: ok}")
    check(c.expect("GET", "/ready", 200) == {"status": "ready"}, "/ready answers ready")
    info = c.expect("GET", "/server_info", 200)
    check(isinstance(info, dict) and isinstance(info.get("version"), str), "server_info", info)


def openapi_description(c):
    """/openapi.json describes every route the server routes, and routes
    every route it describes (both come from one table)."""
    d = c.expect("GET", "/openapi.json", 200)
    check(d.get("openapi", "").startswith("3.") and d["info"]["title"] == "parley", "OpenAPI", d)
    ops = [(m.upper(), p) for p, item in d["paths"].items() for m in item]
    for want in [("POST", "/api/conversations"), ("GET", "/api/conversations/search"),
                 ("GET", "/api/conversations/{conversation_id}/events/{event_id}"),
                 ("POST", "/api/conversations/{conversation_id}/events/append"),
                 ("GET", "/sockets/events/{conversation_id}"), ("GET", "/openapi.json")]:
        check(want in ops, "%s %s described" % want, sorted(ops))
    search = d["paths"]["/api/conversations/{conversation_id}/events/search"]["get"]
    names = {p["name"] for p in search["parameters"]}
    check({"conversation_id", "page_id", "limit", "kind", "body"} <= names, "its parameters", names)
    check(search["security"] == [{"session_api_key": []}], "the API wants the key", search)
    check("security" not in d["paths"]["/alive"]["get"], "/alive does not", d["paths"]["/alive"])
    cid = new_conv(c)
    eid = append(c, cid, user_msg(say="described"))["events"][0]["id"]
    for method, path in sorted(ops, key=lambda o: o[0] == "DELETE"):  # DELETE last
        target = path.replace("{conversation_id}", cid).replace("{event_id}", eid)
        r = c.request(method, target, body={} if method in ("POST", "PATCH") else None)
        routed = not (r.status in (404, 405) and "route" in (r.body or {}).get("detail", ""))
        check(routed, "%s %s is described but not routed" % (method, path), r)


def unknown_path_404(c):
    for p in ("/nope", "/api/nope", "/api/conversations/%s/nope" % ("0" * 32), "/alive/x"):
        r = c.get(p)
        check(r.status == 404 and isinstance(r.body, dict) and "detail" in r.body,
              "GET %s: want 404 {detail}" % p, r)


def wrong_method_405(c):
    cases = [("POST", "/alive", {"GET"}),
             ("DELETE", "/api/conversations/search", {"GET"}),
             ("PUT", conv_path("0" * 32), {"GET", "PATCH", "DELETE"}),
             ("GET", conv_path("0" * 32, "/run"), {"POST"}),
             ("PUT", "/api/conversations", {"GET", "POST"})]
    for method, path, allow in cases:
        r = c.request(method, path)
        check(r.status == 405 and isinstance(r.body, dict) and "detail" in r.body,
              "%s %s: want 405 {detail}" % (method, path), r)
        got = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
        check(got == allow, "%s %s: Allow header" % (method, path), r.headers, allow)


# ------------------------------------------------------------------ 2. auth ---


def api_routes(cid, eid):
    """Every /api route, with a request that works when authorized."""
    return [
        ("POST", "/api/conversations", {}),
        ("GET", "/api/conversations?ids=" + cid, None),
        ("GET", "/api/conversations/search", None),
        ("GET", "/api/conversations/count", None),
        ("GET", conv_path(cid), None),
        ("PATCH", conv_path(cid), {"title": "t"}),
        ("POST", conv_path(cid, "/run"), None),
        ("POST", conv_path(cid, "/interrupt"), None),
        ("POST", conv_path(cid, "/run"), None),
        ("POST", conv_path(cid, "/pause"), None),
        ("GET", conv_path(cid, "/events/search"), None),
        ("GET", conv_path(cid, "/events/count"), None),
        ("GET", conv_path(cid, "/events/" + eid), None),
        ("GET", conv_path(cid, "/events?event_ids=" + eid), None),
        ("POST", conv_path(cid, "/events"), {"role": "user", "content": text("x")}),
        ("POST", conv_path(cid, "/events/append"), user_msg(say="appended")),
        ("DELETE", conv_path(cid), None),
    ]


def auth_checks(srv, key):
    anon = srv.client(api_key=None)
    good = srv.client()
    cid = new_conv(good)
    eid = append(good, cid, user_msg(say="first"))["events"][0]["id"]
    before = event_count(good, cid)
    wrong_keys = [None, "", "wrong", key[:-1], key + "x", key.upper(), key[1:], "x" + key,
                  key + " x", "Bearer " + key]
    for method, path, body in api_routes(cid, eid):
        for k in wrong_keys:
            r = anon.request(method, path, body=body, headers={"X-Session-API-Key": k})
            check(r.status == 401 and isinstance(r.body, dict) and "detail" in r.body,
                  "%s %s with key %r: want 401 {detail}" % (method, path, k), r)
    # nothing of that got through
    check(event_count(good, cid) == before, "refused requests must change nothing")
    check(status_of(good, cid) == "idle", "refused run must not run")
    r = anon.request("GET", "/api/conversations/not-a-uuid")
    check(r.status == 401, "auth comes before validation", r)
    for p in ("/alive", "/health", "/ready", "/server_info"):
        check(anon.get(p).status == 200, p + " stays open without a key")
    # with the key every route works (DELETE last: it takes the conversation)
    for method, path, body in api_routes(cid, eid):
        r = good.request(method, path, body=body)
        check(200 <= r.status < 300, "%s %s with the right key: want 2xx" % (method, path), r)


def auth_several_keys(srv, keys):
    """As upstream's session_api_keys: any of the keys will do."""
    from ws_raw import handshake
    cid = None
    for k in keys:
        c = srv.client(api_key=k)
        check(c.get("/api/conversations/count").status == 200, "key %r works" % k)
        cid = cid or new_conv(c)
    anon = srv.client(api_key=None)
    for k in (None, "", "wrong", keys[0] + keys[1]):
        r = anon.request("GET", "/api/conversations/count", headers={"X-Session-API-Key": k})
        check(r.status == 401, "key %r: 401" % k, r)
    s, _ = handshake(srv.port, "/sockets/events/%s?session_api_key=%s" % (cid, keys[1]))
    s.close()


# --------------------------------------------------------- 3. conversations ---


def create_defaults(c):
    r = c.post("/api/conversations", {})
    check(r.status == 201, "POST {} creates: 201", r)
    b = r.body
    check(UUID_DASHED.match(b.get("id", "")), "id is a dashed UUID", b)
    check(b.get("execution_status") == "idle", "a new conversation is idle", b)
    for f in ("created_at", "updated_at"):
        check(isinstance(b.get(f), str) and NAIVE_TS.match(b[f]), f + " is an ISO time", b)
    check(b.get("max_iterations") == 500, "max_iterations defaults to 500", b)
    check(b.get("stuck_detection") is True, "stuck_detection defaults to true", b)
    check(b.get("tags") == {}, "tags default to {}", b)
    check(c.expect("GET", conv_path(b["id"]), 200)["id"] == b["id"], "GET finds it")


def create_with_given_id(c):
    dashed = "3f1e2d4c-5b6a-4789-8abc-def012345678"
    b1 = c.expect("POST", "/api/conversations", 201, {"conversation_id": dashed, "title": "one"})
    check(b1["id"] == dashed, "the given id is the conversation's", b1)
    b2 = c.expect("POST", "/api/conversations", 200, {"conversation_id": dashed, "title": "two"})
    check(b2["id"] == dashed, "creating it again answers 200 with the same id", b2)
    check(b2.get("title") == "one", "creating it again changes nothing", b2)
    hexid = "0a1b2c3d4e5f40718293a4b5c6d7e8f9"
    b3 = c.expect("POST", "/api/conversations", 201, {"conversation_id": hexid})
    want = "0a1b2c3d-4e5f-4071-8293-a4b5c6d7e8f9"
    check(b3["id"] == want, "a 32-hex id is answered dashed", b3)
    b4 = c.expect("POST", "/api/conversations", 200, {"conversation_id": want})
    check(b4["id"] == want, "the dashed form of a hex-created id is the same conversation", b4)


def create_fields_stored(c):
    agent = {"kind": "Agent", "llm": {"model": "gpt-x", "usage_id": "agent"}, "tools": [
        {"name": "terminal"}]}
    workspace = {"kind": "LocalWorkspace", "working_dir": "/tmp/work"}
    body = {"agent": agent, "workspace": workspace, "title": "My task", "tags": {"k": "v"},
            "max_iterations": 42, "stuck_detection": False,
            "confirmation_policy": {"kind": "AlwaysConfirm"}, "autotitle": False}
    b = c.expect("POST", "/api/conversations", 201, body)
    got = c.expect("GET", conv_path(b["id"]), 200)
    for k, v in body.items():
        if k != "autotitle":
            check(b.get(k) == v and got.get(k) == v, "field %s is stored as given" % k, v, got)


def secrets_not_echoed(c):
    # upstream masks secret values; they must never come back over the API
    b = c.expect("POST", "/api/conversations", 201,
                 {"secrets": {"GITHUB_TOKEN": "s3cr3t-value-123"}})
    got = c.request("GET", conv_path(b["id"]))
    check(b"s3cr3t-value-123" not in got.raw and "s3cr3t-value-123" not in json.dumps(b),
          "a secret's value must not be returned in ConversationInfo", got)


def include_skills(c):
    """As upstream: agent.agent_context.skills is [] in answers unless
    include_skills=true; what is stored keeps them."""
    skills = [{"name": "s%d" % i, "content": "x" * 100, "trigger": None} for i in range(3)]
    body = {"agent": {"kind": "Agent", "llm": {"model": "m"},
                      "agent_context": {"skills": skills, "system_message_suffix": "hi"}}}
    b = c.expect("POST", "/api/conversations", 201, body)
    cid = b["id"]

    def ctx(info):
        return info["agent"]["agent_context"]
    check(ctx(b)["skills"] == [] and ctx(b)["system_message_suffix"] == "hi",
          "create: skills trimmed, the rest kept", b)
    check(ctx(c.expect("GET", conv_path(cid), 200))["skills"] == [], "get: trimmed")
    full = c.expect("GET", conv_path(cid) + "?include_skills=true", 200)
    check(len(ctx(full)["skills"]) == 3, "get ?include_skills=true: all of them", full)
    many = c.expect("GET", "/api/conversations?ids=%s" % cid, 200)
    check(ctx(many[0])["skills"] == [], "batch: trimmed", many)
    many = c.expect("GET", "/api/conversations?include_skills=true&ids=%s" % cid, 200)
    check(len(ctx(many[0])["skills"]) == 3, "batch ?include_skills=true", many)
    items = c.expect("GET", "/api/conversations/search?limit=100", 200)["items"]
    mine = [i for i in items if i["id"] == cid]
    check(mine and ctx(mine[0])["skills"] == [], "search: trimmed", mine)
    r = c.request("GET", conv_path(cid) + "?include_skills=maybe")
    check(r.status == 422, "include_skills=maybe: 422", r)


def create_bad_requests(c):
    for bad in ("nope", "1234", 42, "3f1e2d4c-5b6a-4789-8abc-def01234567",
                "zz1e2d4c5b6a47898abcdef012345678"):
        r = c.post("/api/conversations", {"conversation_id": bad})
        check(r.status == 422 and "detail" in (r.body or {}), "conversation_id %r: 422" % bad, r)
    for raw in (b'{"title": ', b"not json", b"[1, 2"):
        r = c.request("POST", "/api/conversations", raw=raw)
        check(r.status == 400 and "detail" in (r.body or {}), "invalid JSON %r: 400" % raw, r)
    r = c.request("POST", "/api/conversations", raw=b'{"title": "caf\xe9"}')
    check(r.status == 400 and "detail" in (r.body or {}), "a body not in UTF-8: 400", r)
    r = c.post("/api/conversations", {"title": "x" * 201})
    check(r.status == 422, "a title of 201 characters: 422", r)
    b = c.expect("POST", "/api/conversations", 201, {"title": "x" * 200})
    check(b.get("title") == "x" * 200, "a title of 200 characters is fine", b)
    for bad in ({"title": ""}, {"tags": []}, {"tags": {"a": 1}}, {"max_iterations": "many"},
                {"tags": {"Key": "v"}}, {"tags": {"a-b": "v"}}, {"tags": {"": "v"}},
                {"tags": {"k": "x" * 257}}, {"agent": "x"}, {"agent": {"kind": "Nope"}},
                {"agent": {"kind": "Agent", "llm": 5}}, {"agent": {"kind": "Agent", "llm": {}}},
                {"agent": {"kind": "Agent", "tools": "all"}}, {"agent_settings": 7},
                {"agent_settings": {"agent_kind": "other"}}):
        r = c.post("/api/conversations", bad)
        check(r.status == 422, "%r: 422" % bad, r)


def title_counts_characters(c):
    title = "\u00e9" * 200  # 200 characters, 400 bytes of UTF-8
    r = c.post("/api/conversations", {"title": title})
    check(r.status == 201 and r.body.get("title") == title,
          "a title of 200 characters (2 bytes each) is fine: 201", r)
    r = c.post("/api/conversations", {"title": "\u00e9" * 201})
    check(r.status == 422, "201 two-byte characters: 422", r)
    cid = new_conv(c)
    c.expect("PATCH", conv_path(cid), 200, {"title": "\u4e2d" * 200})


def create_with_initial_message(c):
    b = c.expect("POST", "/api/conversations", 201,
                 {"initial_message": {"role": "user",
                                      "content": [{"type": "text", "text": "hi"}]}})
    evs = all_events(c, b["id"])
    check(evs and evs[0]["kind"] == "MessageEvent" and evs[0]["source"] == "user",
          "the initial message is the first event", evs)
    check(evs[0]["llm_message"]["content"][0]["text"] == "hi", "with its text", evs[0])
    check(status_of(c, b["id"]) == "running", "an initial message starts a run")


def get_conversation(c):
    cid = new_conv(c, title="get me")
    hexid = cid.replace("-", "")
    check(c.expect("GET", conv_path(cid), 200)["title"] == "get me", "GET by dashed id")
    check(c.expect("GET", conv_path(hexid), 200)["id"] == cid, "GET by 32-hex id, answered dashed")
    check(c.expect("GET", conv_path(cid.upper()), 200)["id"] == cid, "upper-case hex parses")
    unknown = "11111111-2222-4333-8444-555555555555"
    for form in (unknown, unknown.replace("-", "")):
        r = c.get(conv_path(form))
        check(r.status == 404 and r.body == {"detail": "Conversation not found: " + unknown},
              "unknown conversation: 404 naming the dashed id", r)
    for bad in ("nope", "1234", "11111111-2222-4333-8444-55555555555g"):
        r = c.get(conv_path(bad))
        check(r.status == 422 and "detail" in (r.body or {}), "non-UUID id %r: 422" % bad, r)


def get_many(c):
    a = new_conv(c)
    unknown = "11111111-2222-4333-8444-555555555555"
    got = c.expect("GET", "/api/conversations?" + qs({"ids": [a, unknown]}), 200)
    check(isinstance(got, list) and len(got) == 2 and got[1] is None, "[info, null]", got)
    check(got[0] == c.expect("GET", conv_path(a), 200), "the info is the GET's", got)
    check(c.expect("GET", "/api/conversations", 200) == [], "no ids: []")
    r = c.get("/api/conversations?ids=nope")
    check(r.status == 422, "a bad id in ids: 422", r)


def walk_conversations(c, limit, **q):
    """All conversations of a search, page by page (inclusive cursor)."""
    items, page = [], None
    for _ in range(1000):
        params = dict(q, limit=str(limit))
        if page:
            params["page_id"] = page
        b = c.expect("GET", "/api/conversations/search?" + qs(params), 200)
        check(set(b) == {"items", "next_page_id"}, "search answers {items, next_page_id}", b)
        check(len(b["items"]) <= limit, "at most limit items")
        if items and page:
            check(b["items"] and b["items"][0]["id"].replace("-", "") == page,
                  "the next page starts AT next_page_id", page, b["items"][:1])
        items += b["items"]
        page = b["next_page_id"]
        if page is None:
            return items
        check(HEX32.match(page), "next_page_id is a 32-hex id", page)
        check(len(b["items"]) == limit, "pages before the last are full")
    raise TestFailure("conversation search paging does not end")


def search_conversations(c):
    mine = [new_conv(c, title="s%d" % i) for i in range(5)]
    total = int(c.request("GET", "/api/conversations/count").raw)
    dflt = c.expect("GET", "/api/conversations/search", 200)
    check(len(dflt["items"]) == min(total, 100), "default limit 100", len(dflt["items"]), total)
    created = [i["created_at"] for i in dflt["items"]]
    check(created == sorted(created, reverse=True), "default order: CREATED_AT_DESC", created)
    for order, desc in (("CREATED_AT_DESC", True), ("CREATED_AT", False)):
        for limit in (1, 3, 100):
            items = walk_conversations(c, limit, sort_order=order)
            ids = [i["id"] for i in items]
            check(len(ids) == total and len(set(ids)) == total,
                  "%s limit %d walks every conversation once" % (order, limit), len(ids), total)
            ca = [i["created_at"] for i in items]
            check(ca == sorted(ca, reverse=desc), "%s order" % order, ca)
            check(all(m in ids for m in mine), "my conversations are listed")
        if desc:
            check([i["id"] for i in dflt["items"]] == ids[:100], "default = CREATED_AT_DESC")
    for order, desc in (("UPDATED_AT", False), ("UPDATED_AT_DESC", True)):
        items = walk_conversations(c, 4, sort_order=order)
        check(len({i["id"] for i in items}) == total == len(items), order + " walks all once")
        ua = [i["updated_at"] for i in items]
        check(ua == sorted(ua, reverse=desc), order + " order", ua)
    # the newest five are mine, newest first
    check([i["id"] for i in walk_conversations(c, 5)][:5] == mine[::-1],
          "newest first", mine[::-1])
    for bad in ("limit=0", "limit=101", "limit=x", "limit=-1", "status=bogus",
                "sort_order=NEWEST", "sort_order=created_at"):
        r = c.get("/api/conversations/search?" + bad)
        check(r.status == 422 and "detail" in (r.body or {}), "search?%s: 422" % bad, r)
    # an unknown cursor, a conversation id or not, starts from the top, as upstream
    top = c.expect("GET", "/api/conversations/search?limit=3", 200)
    for cursor in ("nope", "11111111-2222-4333-8444-555555555555"):
        b = c.expect("GET", "/api/conversations/search?limit=3&page_id=" + cursor, 200)
        check([i["id"] for i in b["items"]] == [i["id"] for i in top["items"]],
              "page_id=%s starts from the top" % cursor, b)
    # a dashed page_id is the same cursor
    b = c.expect("GET", "/api/conversations/search?limit=2", 200)
    if b["next_page_id"]:
        dashed = UUIDify(b["next_page_id"])
        b2 = c.expect("GET", "/api/conversations/search?limit=1&page_id=" + dashed, 200)
        check(b2["items"][0]["id"] == dashed, "a dashed page_id works too", b2)


def stuck_turns(c, cid, first, n):
    """n identical action/observation turns: the stuck detector's first rule."""
    for i in range(first, first + n):
        append(c, cid, [action("sa%d" % i, "sc%d" % i, "sr%d" % i),
                        observation("so%d" % i, "sc%d" % i)])


def stuck_settled(c, cid):
    """Once the stuck finding is counted and the conversation's count covers
    its status change too: its info then. The conversation appends the
    finding and the status change as two units, and a cluster stores them
    one after the other: a GET between them counts the finding, not the
    status event the log has a moment later."""
    def settled():
        info = c.expect("GET", conv_path(cid), 200)
        if info["stuck_findings"] != 1 or info["execution_status"] != "stuck":
            return None
        evs = all_events(c, cid)
        at = [k for k, e in enumerate(evs) if e.get("key") == "execution_status"
              and e.get("value") == "stuck"]
        return info if at and info["event_count"] > at[-1] else None
    return wait_for("the stuck finding and its status change", settled)


def conversation_findings(c):
    """parley's own info fields: event_count, violations, stuck_findings, the same in
    GET, the batch get and the search, and moving as events are appended."""
    fields = ("event_count", "violations", "stuck_findings")
    cid = new_conv(c, title="findings")
    info = c.expect("GET", conv_path(cid), 200)
    check(all(info.get(f) == 0 for f in fields), "a new conversation: all zero", info)
    append(c, cid, [user_msg("u1"), action("a1", "c1", "r1"), observation("o1", "c1")])
    info = c.expect("GET", conv_path(cid), 200)
    check(info["event_count"] == 3 == event_count(c, cid), "event_count is the log's", info)

    obs = new_conv(c, title="observed", compliance_policy="observe")
    append(c, obs, action("a1", "c1", "r1"))
    append(c, obs, agent_msg("m1", "too soon", "r2"))  # interleaved_message, observed
    # the record is the conversation's own event, durable right after m1's answer
    info = wait_for("the violation to be counted",
                    lambda: (lambda i: i if i["violations"] == 1 else None)(
                        c.expect("GET", conv_path(obs), 200)))
    evs = all_events(c, obs)
    codes = [e.get("code") for e in evs if e["kind"] == "ConversationErrorEvent"]
    check(codes == ["ComplianceViolation"], "observe mode records the violation", codes)
    check((info["event_count"], info["stuck_findings"]) == (len(evs), 0),
          "the violation is counted with its event", info)

    st = new_conv(c, title="stuck")
    append(c, st, user_msg("u1", say="list the files"))
    stuck_turns(c, st, 1, 4)
    info = stuck_settled(c, st)
    check(info["execution_status"] == "stuck" and info["violations"] == 0,
          "a stuck conversation, its finding counted", info)
    check(info["event_count"] == event_count(c, st), "its event_count is the log's", info)

    many = c.expect("GET", "/api/conversations?" + qs({"ids": [obs, st]}), 200)
    found = {i["id"]: i for i in c.expect("GET", "/api/conversations/search?limit=100", 200)
             ["items"]}
    for i in many:
        check(all(i.get(f) == c.expect("GET", conv_path(i["id"]), 200)[f] for f in fields),
              "the batch get carries them", i)
        check(all(found[i["id"]].get(f) == i[f] for f in fields), "so does the search",
              found[i["id"]])


def UUIDify(h):
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def count_conversations(c):
    r = c.get("/api/conversations/count")
    check(r.status == 200 and re.match(rb"^\d+$", r.raw), "count is a bare integer", r)
    n = int(r.raw)
    new_conv(c)
    check(int(c.get("/api/conversations/count").raw) == n + 1, "count grows by one")
    check(c.get("/api/conversations/count?status=bogus").status == 422, "bad status: 422")


def status_filter(c):
    cid = new_conv(c)
    c.expect("POST", conv_path(cid, "/pause"), 200)
    paused = walk_conversations(c, 2, status="paused")
    check(cid in [i["id"] for i in paused], "status=paused lists the paused one")
    check(all(i["execution_status"] == "paused" for i in paused), "only paused ones", paused)
    r = c.get("/api/conversations/count?status=paused")
    check(r.status == 200 and int(r.raw) == len(paused), "count?status=paused", r, len(paused))
    idle = walk_conversations(c, 100, status="idle")
    check(cid not in [i["id"] for i in idle], "not among the idle ones")
    n_idle = int(c.get("/api/conversations/count?status=idle").raw)
    check(n_idle == len(idle), "count?status=idle", n_idle, len(idle))


def lists_follow(c):
    """A search or count shows what was just answered: an append, a pause, a
    rename (lists read the server's summaries, which each answer updates first)."""
    a, b = new_conv(c, title="follow a"), new_conv(c, title="follow b")

    def first(**q):
        return c.expect("GET", "/api/conversations/search?" + qs(dict(q, limit="1")),
                        200)["items"][0]

    for i in range(3):
        append(c, a, user_msg("fa%d" % i))
        top = first(sort_order="UPDATED_AT_DESC")
        check(top["id"] == a and top["event_count"] == i + 1,
              "the appended-to conversation is the last updated, its count the log's", i, top)
    c.expect("POST", conv_path(b, "/pause"), 200)
    paused = walk_conversations(c, 100, status="paused")
    check(b in [i["id"] for i in paused], "paused at once in status=paused", paused)
    n = int(c.get("/api/conversations/count?status=paused").raw)
    check(n == len(paused), "count?status=paused at once", n, len(paused))
    c.expect("PATCH", conv_path(b), 200, {"title": "renamed"})
    top = first(sort_order="UPDATED_AT_DESC")
    check(top["id"] == b and top["title"] == "renamed", "a rename moves it to the top", top)
    c.expect("POST", conv_path(b, "/run"), 200)
    check(b not in [i["id"] for i in walk_conversations(c, 100, status="paused")],
          "run: no longer paused")


def patch_conversation(c):
    cid = new_conv(c)
    b = c.expect("PATCH", conv_path(cid), 200, {"title": "t", "tags": {"a": "b"}})
    check(b == {"success": True}, "PATCH answers success", b)
    info = c.expect("GET", conv_path(cid), 200)
    check(info["title"] == "t" and info["tags"] == {"a": "b"}, "GET shows the changes", info)
    before = info["updated_at"]
    c.expect("PATCH", conv_path(cid), 200, {"title": "  t2 \n"})
    info = c.expect("GET", conv_path(cid), 200)
    check(info["title"] == "t2" and info["tags"] == {"a": "b"}, "PATCH changes only what it names",
          info)
    check(info["updated_at"] > before, "an update moves updated_at, as upstream", before, info)
    r = c.request("PATCH", conv_path(cid), body={"title": "   "})
    check(r.status == 422, "a title of spaces: 422", r)
    for bad in ({"execution_status": "finished"}, {"title": "x" * 201}, {"tags": "x"}):
        r = c.request("PATCH", conv_path(cid), body=bad)
        check(r.status == 422 and "detail" in (r.body or {}), "PATCH %r: 422" % bad, r)
    check(c.expect("GET", conv_path(cid), 200)["execution_status"] == "idle", "status unchanged")
    r = c.request("PATCH", conv_path("11111111-2222-4333-8444-555555555555"), body={"title": "x"})
    check(r.status == 404 and "detail" in (r.body or {}), "PATCH unknown: 404", r)


def patch_concurrent(srv):
    """Two PATCHes at once, one changing the title and one the tags, keep
    both changes (each is a read-modify-write of the stored info)."""
    import threading
    c = srv.client()
    lost = []
    for cid in [new_conv(c) for _ in range(4)]:
        for i in range(40):
            clients = [srv.client(), srv.client()]
            bodies = [{"title": "t%d" % i}, {"tags": {"round": str(i)}}]
            gate = threading.Barrier(2)

            def patch(k):
                gate.wait()
                clients[k].expect("PATCH", conv_path(cid), 200, bodies[k])

            threads = [threading.Thread(target=patch, args=(k,)) for k in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for cl in clients:
                cl.close()
            info = c.expect("GET", conv_path(cid), 200)
            if info.get("title") != "t%d" % i or info.get("tags") != {"round": str(i)}:
                lost.append((i, info.get("title"), info.get("tags")))
    check(not lost, "no PATCH is lost", lost[:5], len(lost))


def run_pause_interrupt(c):
    cid = new_conv(c)
    check(c.expect("POST", conv_path(cid, "/run"), 200) == {"success": True}, "run: success")
    check(status_of(c, cid) == "running", "running after run")
    r = c.post(conv_path(cid, "/run"))
    check(r.status == 409 and "already running" in r.body.get("detail", ""),
          "run again: 409 already running", r)
    check(c.expect("POST", conv_path(cid, "/pause"), 200) == {"success": True}, "pause: success")
    check(status_of(c, cid) == "paused", "paused after pause")
    kinds = [e["kind"] for e in all_events(c, cid)]
    check("PauseEvent" in kinds, "a PauseEvent is in the events", kinds)
    c.expect("POST", conv_path(cid, "/run"), 200)
    check(status_of(c, cid) == "running", "run from paused")
    check(c.expect("POST", conv_path(cid, "/interrupt"), 200) == {"success": True}, "interrupt")
    check(status_of(c, cid) == "paused", "paused after interrupt")
    evs = all_events(c, cid)
    check("InterruptEvent" in [e["kind"] for e in evs], "an InterruptEvent is in the events")
    states = [e["value"] for e in evs if e["kind"] == "ConversationStateUpdateEvent"
              and e.get("key") == "execution_status"]
    check(states == ["running", "paused", "running", "paused"],
          "each change is an execution_status event", states)
    unknown = "11111111-2222-4333-8444-555555555555"
    for what in ("run", "pause", "interrupt"):
        r = c.post(conv_path(unknown, "/" + what))
        check(r.status in (400, 404), "%s an unknown conversation: 404 (upstream 400)" % what, r)


def pause_when_paused(c):
    # spec 2.3: pause and interrupt answer Success (400 only for an unknown
    # conversation); 2.4: pause changes the status only from idle/running,
    # otherwise it does nothing (upstream LocalConversation.pause is a no-op)
    cid = new_conv(c)
    c.expect("POST", conv_path(cid, "/pause"), 200)
    r = c.post(conv_path(cid, "/pause"))
    check(r.status == 200 and r.body == {"success": True}, "pause a paused one: success", r)
    r = c.post(conv_path(cid, "/interrupt"))
    check(r.status == 200 and r.body == {"success": True}, "interrupt a paused one: success", r)
    check(status_of(c, cid) == "paused", "still paused")
    kinds = [e["kind"] for e in all_events(c, cid)]
    check(kinds.count("PauseEvent") == 1, "one PauseEvent", kinds)


def conversation_delete(c):
    cid = new_conv(c, title="doomed")
    append(c, cid, user_msg(say="bye"))
    n = int(c.get("/api/conversations/count").raw)
    r = c.request("DELETE", conv_path(cid))
    check(r.status == 200 and r.body == {"success": True}, "DELETE: 200 {success: true}", r)
    r = c.get(conv_path(cid))
    check(r.status == 404, "GET after DELETE: 404", r)
    check(int(c.get("/api/conversations/count").raw) == n - 1, "count after DELETE")
    ids = [i["id"] for i in walk_conversations(c, 100)]
    check(cid not in ids, "gone from search")
    check(c.get(conv_path(cid, "/events/search")).status == 404, "its events are gone")
    check(c.get("/api/conversations?ids=" + cid).body == [None], "batch: null")
    r = c.request("DELETE", conv_path(cid))
    check(r.status in (400, 404), "DELETE again: 404 (upstream 400)", r)
    again = c.post("/api/conversations", {"conversation_id": cid})
    check(again.status == 201 and event_count(c, cid) == 0,
          "its id can be created again, empty", again)


def parent_and_children(c):
    """upstream's tests/agent_server/test_parent_child_conversations.py,
    over HTTP: the link is fixed at creation, listed from both sides,
    validated (self, unknown, another workspace: 422), and a deleted parent
    orphans its children rather than taking them along."""
    ws = {"kind": "LocalWorkspace", "working_dir": "/tmp/pc-work"}
    top = c.expect("POST", "/api/conversations", 201, {"workspace": ws})
    check(top.get("parent_conversation_id", 0) is None and top.get("sub_conversation_ids") == [],
          "a top-level conversation has no relationships", top)
    p = top["id"]
    a = c.expect("POST", "/api/conversations", 201,
                 {"workspace": ws, "parent_conversation_id": p})
    check(a["parent_conversation_id"] == p and a["sub_conversation_ids"] == [],
          "a child records its parent", a)
    b = c.expect("POST", "/api/conversations", 201,
                 {"workspace": ws, "parent_conversation_id": p.replace("-", "")})
    check(b["parent_conversation_id"] == p, "a parent given as 32 hex digits is shown dashed", b)
    kids = sorted([a["id"], b["id"]])
    got = c.expect("GET", conv_path(p), 200)
    check(got["sub_conversation_ids"] == kids, "the parent lists its children, in id order", got)
    many = c.expect("GET", "/api/conversations?ids=%s&ids=%s" % (p, a["id"]), 200)
    check(many[0]["sub_conversation_ids"] == kids and many[1]["parent_conversation_id"] == p,
          "batch get shows both sides", many)
    items = {i["id"]: i for i in walk_conversations(c, 100)}
    check(items[p]["sub_conversation_ids"] == kids and items[a["id"]]["parent_conversation_id"] == p,
          "search shows both sides")
    grand = c.expect("POST", "/api/conversations", 201,
                     {"workspace": ws, "parent_conversation_id": a["id"]})
    check(c.expect("GET", conv_path(a["id"]), 200)["sub_conversation_ids"] == [grand["id"]],
          "a child can have children", grand)
    for body, why in (
            ({"workspace": ws, "conversation_id": "5e1f0c2a-9b8d-4c7e-a6f5-4d3c2b1a0f9e",
              "parent_conversation_id": "5e1f0c2a-9b8d-4c7e-a6f5-4d3c2b1a0f9e"}, "its own parent"),
            ({"workspace": ws, "parent_conversation_id": "00000000-0000-4000-8000-000000000000"},
             "not found"),
            ({"workspace": {"kind": "LocalWorkspace", "working_dir": "/tmp/elsewhere"},
              "parent_conversation_id": p}, "different workspace"),
            ({"parent_conversation_id": p}, "different workspace"),
            ({"workspace": ws, "parent_conversation_id": "nope"}, "UUID"),
            ({"workspace": ws, "parent_conversation_id": 7}, "UUID")):
        n = int(c.get("/api/conversations/count").raw)
        r = c.post("/api/conversations", body)
        check(r.status == 422 and why in (r.body or {}).get("detail", ""),
              "parent %r: 422 saying %r" % (body.get("parent_conversation_id"), why), r)
        check(int(c.get("/api/conversations/count").raw) == n, "nothing was created")
    r = c.post("/api/conversations", {"conversation_id": a["id"], "parent_conversation_id":
                                      "00000000-0000-4000-8000-000000000000"})
    check(r.status == 200 and r.body["parent_conversation_id"] == p,
          "creating an existing one again returns it as is", r)
    r = c.expect("PATCH", conv_path(a["id"]), 422, {"parent_conversation_id": None})
    c.expect("DELETE", conv_path(b["id"]), 200)
    check(c.expect("GET", conv_path(p), 200)["sub_conversation_ids"] == [a["id"]],
          "deleting a child shrinks its parent's list")
    c.expect("DELETE", conv_path(p), 200)
    got = c.expect("GET", conv_path(a["id"]), 200)
    check(got["parent_conversation_id"] == p, "deleting a parent orphans its children", got)
    return p, a["id"], grand["id"]


# ---------------------------------------------------------------- 4. events ---


def post_message(c):
    cid = new_conv(c)
    b = c.expect("POST", conv_path(cid, "/events"), 200,
                 {"role": "user", "content": [{"type": "text", "text": "hello"}], "run": False})
    check(b == {"success": True}, "POST events: success", b)
    evs = all_events(c, cid)
    check(len(evs) == 1 and evs[0]["kind"] == "MessageEvent" and evs[0]["source"] == "user"
          and evs[0]["llm_message"]["content"][0]["text"] == "hello", "a user MessageEvent", evs)
    check(status_of(c, cid) == "idle", "run: false leaves it idle")
    c.expect("POST", conv_path(cid, "/events"), 200,
             {"role": "user", "content": text("go"), "run": True})
    check(status_of(c, cid) == "running", "run: true starts a run")
    c.expect("POST", conv_path(cid, "/events"), 200,
             {"role": "user", "content": text("more"), "run": True})
    check(status_of(c, cid) == "running", "run: true while running is fine")
    c.expect("POST", conv_path(cid, "/events"), 200,
             {"role": "user", "content": text("extra fields"), "sender": "bob", "extra": 1})
    check(all_events(c, cid)[-1]["llm_message"]["content"][0]["text"] == "extra fields",
          "extra fields (sender...) are ignored, as upstream")
    c.expect("POST", conv_path(cid, "/events"), 200, {"role": "user"})  # upstream: content []
    check(all_events(c, cid)[-1]["llm_message"]["content"] == [], "no content is none")
    for bad in ({"content": "x"}, {"content": [], "run": "yes"}, {"content": 7}):
        r = c.post(conv_path(cid, "/events"), bad)
        check(r.status == 422, "POST events %r: 422" % bad, r)
    r = c.request("POST", conv_path(cid, "/events"), raw=b"{")
    check(r.status == 400, "POST events with invalid JSON: 400", r)


def event_shape(c):
    cid = new_conv(c)
    first = append(c, cid, user_msg(say="one"))["events"][0]["id"]
    append(c, cid, agent_msg("m-1", "two"))
    r = c.get(conv_path(cid, "/events/search"))
    raw_items = json.loads(r.raw, object_pairs_hook=lambda kv: kv)[0][1]
    for pairs in raw_items:
        check(pairs[-1][0] == "kind", "kind comes last in an event", pairs)
    evs = r.body["items"]
    for e in evs:
        for f in ("id", "timestamp", "source", "kind"):
            check(isinstance(e.get(f), str), "every event has " + f, e)
        check(NAIVE_TS.match(e["timestamp"]), "a naive ISO timestamp", e["timestamp"])
        check(None not in e.values(), "no nulls on search", e)
    check(UUID_DASHED.match(first), "a stamped id is a UUID", first)
    check(evs[1]["parent_id"] == first, "parent_id is stamped: the head", evs)


def make_big(c, n=250):
    """A conversation of n events (user, action, observation, agent, env), in arrays."""
    cid = new_conv(c, title="big")
    evs = []
    for i in range(n):
        k = i % 5
        r = i // 5
        if k == 0:
            e = user_msg("u%d" % i, "Question %d about the BROWN fox" % r if r % 7 == 0
                         else "Question %d" % r)
        elif k == 1:
            e = action("a%d" % i, "call-%d" % r, "resp-%d" % r)
        elif k == 2:
            e = observation("o%d" % i, "call-%d" % r, "question brown output %d" % r)
        elif k == 3:
            e = agent_msg("m%d" % i, "Answer %d" % r, "resp-m-%d" % r,
                          llm_message={"role": "assistant", "content": text("Answer %d" % r),
                                       "reasoning_content": "thinking of a Brown bear"
                                       if r == 3 else "hmm", "thinking_blocks": []})
        else:
            e = user_msg("e%d" % i, "environment note %d" % r, source="environment",
                         extended_content=text("Extra BrOwN" if r == 5 else "extra"))
        evs.append(e)
    for i in range(0, n, 50):
        b = append(c, cid, evs[i:i + 50])
        got = b["events"]
        check([g["id"] for g in got] == [e["id"] for e in evs[i:i + 50]],
              "array answer lists its events", got[:3])
        check([g["index"] for g in got] == list(range(i, i + len(got))),
              "indexes are the log positions", [g["index"] for g in got][:5])
    return cid, [e["id"] for e in evs]


def search_order_and_limits(c, big):
    cid, ids = big
    items = all_events(c, cid)
    check([e["id"] for e in items] == ids, "search returns the append order")
    desc = all_events(c, cid, order="TIMESTAMP_DESC")
    check([e["id"] for e in desc] == ids[::-1], "TIMESTAMP_DESC reverses it")
    asc = all_events(c, cid, order="TIMESTAMP")
    check([e["id"] for e in asc] == ids, "TIMESTAMP is the default")
    for lim in (1, 100):
        b = c.expect("GET", conv_path(cid, "/events/search?limit=%d" % lim), 200)
        check(len(b["items"]) == lim and b["next_page_id"] == ids[lim], "limit %d" % lim, b)
    for bad in ("0", "101", "-1", "abc", "", "1.5"):
        r = c.get(conv_path(cid, "/events/search?limit=" + bad))
        check(r.status == 422 and "detail" in (r.body or {}), "limit=%r: 422" % bad, r)
    r = c.get(conv_path(cid, "/events/search?sort_order=NEWEST"))
    check(r.status == 422, "bad sort_order: 422", r)


def search_paging(c, big):
    cid, ids = big
    for order, want in ((None, ids), ("TIMESTAMP_DESC", ids[::-1])):
        got, page, sizes = [], None, []
        while True:
            q = {"limit": "100"}
            if order:
                q["sort_order"] = order
            if page:
                q["page_id"] = page
            b = c.expect("GET", conv_path(cid, "/events/search?" + qs(q)), 200)
            sizes.append(len(b["items"]))
            got += [e["id"] for e in b["items"]]
            page = b["next_page_id"]
            if page is None:
                break
            check(page == want[len(got)], "next_page_id is the next page's first event",
                  page, want[len(got)])
        check(sizes == [100, 100, 50], "%s pages of 100, 100, 50" % order, sizes)
        check(got == want, "%s: every event exactly once, in order" % order)
    # inclusive cursor from the middle, and an unknown one starts at the start (upstream)
    b = c.expect("GET", conv_path(cid, "/events/search?limit=3&page_id=" + ids[10]), 200)
    check([e["id"] for e in b["items"]] == ids[10:13], "page_id is inclusive", b)
    b = c.expect("GET", conv_path(cid, "/events/search?limit=3&page_id=" + ids[10] +
                                  "&sort_order=TIMESTAMP_DESC"), 200)
    check([e["id"] for e in b["items"]] == ids[10:7:-1], "inclusive going down too", b)
    b = c.expect("GET", conv_path(cid, "/events/search?limit=3&page_id=no-such-event"), 200)
    check([e["id"] for e in b["items"]] == ids[:3], "an unknown page_id starts at the start", b)
    b = c.expect("GET", conv_path(cid, "/events/search?limit=3&sort_order=TIMESTAMP_DESC"
                                  "&page_id=no-such-event"), 200)
    check([e["id"] for e in b["items"]] == ids[:-4:-1], "...or at the end going down", b)


def body_matches(e, needle):
    if e["kind"] != "MessageEvent":
        return False
    n = needle.lower()
    m = e["llm_message"]
    texts = [x.get("text", "") for x in m.get("content", [])]
    texts += [x.get("text", "") for x in e.get("extended_content", [])]
    texts.append(m.get("reasoning_content") or "")
    return any(n in t.lower() for t in texts)


def filtered_search(c, cid, evs, name, params, pred):
    want = [e["id"] for e in evs if pred(e)]
    for order, w in ((None, want), ("TIMESTAMP_DESC", want[::-1])):
        got = [e["id"] for e in all_events(c, cid, limit=7, order=order, **params)]
        check(got == w, "search %s (%s): the matching events, each once" % (name, order),
              len(got), len(w))
    n = event_count(c, cid, **params)
    check(n == len(want), "count %s = matching events" % name, n, len(want))
    return want


def search_filters(c, big):
    cid, ids = big
    evs = all_events(c, cid)
    check(event_count(c, cid) == 250, "count = number of events")
    for kind in ("MessageEvent", "ActionEvent", "ObservationEvent"):
        for form in (QUALIFIED[kind], kind):
            w = filtered_search(c, cid, evs, "kind=" + form, {"kind": form},
                                lambda e, k=kind: e["kind"] == k)
            check(w, "some %s events" % kind)
    check(event_count(c, cid, kind="NoSuchEvent") == 0, "an unknown kind matches nothing")
    for src in ("user", "agent", "environment"):
        w = filtered_search(c, cid, evs, "source=" + src, {"source": src},
                            lambda e, s=src: e["source"] == s)
        check(w, "some %s events" % src)
    for needle in ("brown", "BROWN", "question 1", "Extra brown", "bear"):
        w = filtered_search(c, cid, evs, "body=" + needle, {"body": needle},
                            lambda e, n=needle: body_matches(e, n))
        check(w, "body=%s matches something" % needle)
    w = filtered_search(c, cid, evs, "body=", {"body": ""}, lambda e: e["kind"] == "MessageEvent")
    check(w, "an empty body= is a filter, as upstream: every message")
    w = filtered_search(c, cid, evs, "body=output", {"body": "output"}, lambda e: False)
    check(not w, "body never matches a non-message event")
    w = filtered_search(c, cid, evs, "source=user&body=brown", {"source": "user", "body": "brown"},
                        lambda e: e["source"] == "user" and body_matches(e, "brown"))
    check(w, "filters combine")


def timestamp_filters(c, big):
    cid, ids = big
    evs = all_events(c, cid)
    stamps = sorted({e["timestamp"] for e in evs})
    check(len(stamps) > 3, "the events have several timestamps", stamps[:5])
    for t in (stamps[0], stamps[len(stamps) // 3], stamps[-1]):
        gte = filtered_search(c, cid, evs, "timestamp__gte=" + t, {"timestamp__gte": t},
                              lambda e, t=t: e["timestamp"] >= t)
        check(gte and evs[[e["timestamp"] for e in evs].index(t)]["id"] in gte,
              "timestamp__gte is inclusive")
        lt = filtered_search(c, cid, evs, "timestamp__lt=" + t, {"timestamp__lt": t},
                             lambda e, t=t: e["timestamp"] < t)
        check(set(lt).isdisjoint(gte) and len(lt) + len(gte) == len(evs),
              "timestamp__lt is exclusive: gte and lt split the log")
        for suffix in ("Z", "+00:00"):
            u = utc_form(t, suffix)
            got = [e["id"] for e in all_events(c, cid, timestamp__gte=u)]
            check(got == gte, "timestamp__gte=%s (= %s local)" % (u, t), len(got), len(gte))
            check(event_count(c, cid, timestamp__lt=u) == len(lt), "timestamp__lt=" + u)
    lo, hi = stamps[1], stamps[-2]
    filtered_search(c, cid, evs, "gte&lt", {"timestamp__gte": lo, "timestamp__lt": hi},
                    lambda e: lo <= e["timestamp"] < hi)
    filtered_search(c, cid, evs, "a date", {"timestamp__gte": "2000-01-01"}, lambda e: True)
    for bad in ("yesterday", "2026-13-01T00:00:00", "2026-08-22T25:00:00", "2026-08-22T10:15:02X",
                "12345"):
        for f in ("timestamp__gte", "timestamp__lt"):
            for route in ("search", "count"):
                r = c.get(conv_path(cid, "/events/%s?%s" % (route, qs({f: bad}))))
                check(r.status == 422 and "detail" in (r.body or {}),
                      "%s %s=%r: 422" % (route, f, bad), r)


def get_event(c, big):
    cid, ids = big
    evs = all_events(c, cid)
    for i in (0, 1, 2, 137, 249):
        got = c.expect("GET", conv_path(cid, "/events/" + ids[i]), 200)
        check(got == evs[i], "GET an event: the event", got, evs[i])
    r = c.get(conv_path(cid, "/events/no-such-event"))
    check(r.status == 404 and isinstance(r.body, dict) and "detail" in r.body, "unknown: 404", r)


def batch_get_events(c, big):
    cid, ids = big
    evs = {e["id"]: e for e in all_events(c, cid)}
    got = c.expect("GET", conv_path(cid, "/events"), 200, {"event_ids": [ids[3], "nope"]})
    check(got == [evs[ids[3]], None], "batch (JSON body): [event, null]", got)
    got = c.expect("GET", conv_path(cid, "/events?" + qs({"event_ids": [ids[5], "nope", ids[0]]})),
                   200)
    check(got == [evs[ids[5]], None, evs[ids[0]]], "batch (query): in the order asked", got)
    got = c.expect("GET", conv_path(cid, "/events"), 200, {"event_ids": []})
    check(got == [], "an empty batch", got)


def unknown_conversation_events(c):
    u = conv_path("11111111-2222-4333-8444-555555555555")
    want = {"detail": "Conversation not found: 11111111-2222-4333-8444-555555555555"}
    for method, path, body in (("GET", "/events/search", None), ("GET", "/events/count", None),
                               ("GET", "/events/some-id", None),
                               ("GET", "/events?event_ids=x", None),
                               ("GET", "/events", {"event_ids": ["x"]}),
                               ("POST", "/events", {"role": "user", "content": text("x")}),
                               ("POST", "/events/append", user_msg(say="x"))):
        r = c.request(method, u + path, body=body)
        check(r.status == 404 and r.body == want, "%s %s on an unknown conversation: 404"
              % (method, path), r)
        check(c.get(u).status == 404, "and it is not created by that")


# -------------------------------------------------- 5. the producer route ---

REFUSED = []  # (conversation id, event) for every event that was refused


def note_refused(cid, ev):
    REFUSED.append((cid, ev))


def content(ev):
    """What an event says: without what the server stamps."""
    return {k: v for k, v in ev.items() if k not in ("timestamp", "parent_id")}


def append_single_and_array(c):
    cid = new_conv(c)
    b = append(c, cid, user_msg("u1"))
    check(b == {"events": [{"id": "u1", "index": 0}]}, "201 {events: [{id, index}]}", b)
    b = append(c, cid, [action("a1", "c1", "r1"), observation("t1", "c1"), agent_msg("m1")])
    check(b == {"events": [{"id": "a1", "index": 1}, {"id": "t1", "index": 2},
                           {"id": "m1", "index": 3}]}, "an array: each with its index", b)
    b = append(c, cid, user_msg(say="no id given"))
    check(UUID_DASHED.match(b["events"][0]["id"]) and b["events"][0]["index"] == 4,
          "an id is given to an event without one", b)
    check(log_ids(c, cid) == ["u1", "a1", "t1", "m1", b["events"][0]["id"]], "the log")
    e = c.expect("GET", conv_path(cid, "/events/t1"), 200)
    check(e["parent_id"] == "a1" and e["observation"]["kind"] == "TerminalObservation",
          "stored as given, parent stamped", e)


def append_duplicates(c):
    cid = new_conv(c)
    ev = user_msg("u1", timestamp="2026-08-22T10:15:00.001731")
    append(c, cid, ev)
    append(c, cid, agent_msg("m1", "hi"))
    b = append(c, cid, ev)
    check(b.get("duplicate") is True and b["events"] == [{"id": "u1", "index": 0}],
          "the same event again: 201 duplicate", b)
    stored = c.expect("GET", conv_path(cid, "/events/m1"), 200)
    b = append(c, cid, stored)
    check(b.get("duplicate") is True and b["events"] == [{"id": "m1", "index": 1}],
          "the stored event (stamped parent and time) again: a duplicate", b)
    b = append(c, cid, agent_msg("m1", "hi"))
    check(b.get("duplicate") is True, "without its stamped timestamp: a duplicate", b)
    b = append(c, cid, [ev, stored])
    check(b.get("duplicate") is True, "an array of retries: a duplicate", b)
    check(event_count(c, cid) == 2, "nothing appended twice")
    refused(c, cid, user_msg("u1", say="other words"), "duplicate_event_id")
    refused(c, cid, agent_msg("u1", "hi"), "duplicate_event_id")
    check(log_ids(c, cid) == ["u1", "m1"], "the log is unchanged")
    check(c.expect("GET", conv_path(cid, "/events/u1"), 200)["llm_message"]["content"] ==
          ev["llm_message"]["content"], "the first content stays")


def retries_beyond_the_tail(c, srv):
    """Checks that match events older than what a cluster node keeps of a
    log in memory (its last 256): the verdicts are those of any other
    event, and no loop thread waits for the cluster for them (issue 22:
    they are confirmed in the thread pool)."""
    cid = new_conv(c)
    first = user_msg("u0", timestamp="2026-08-22T10:15:00.001731")
    append(c, cid, [first, action("a0", "c0", "r0"), observation("t0", "c0")])
    for i in range(0, 300, 100):
        append(c, cid, [user_msg("f%d" % j, say="filler %d" % j) for j in range(i, i + 100)])
    b = append(c, cid, first)
    check(b.get("duplicate") is True and b["events"] == [{"id": "u0", "index": 0}],
          "a retry of event 0 of 303: 201 duplicate", b)
    b = append(c, cid, [first, user_msg("n1")])
    got = {e["id"]: e.get("index") for e in b.get("events", [])}
    check(got == {"u0": 0, "n1": 303}, "a retry of event 0 with a new event: both indexes", b)
    refused(c, cid, user_msg("u0", say="other words"), "duplicate_event_id")
    refused(c, cid, observation("t9", "c0"), "duplicate_tool_result")
    refused(c, cid, action("a9", "c0", "r9"), "duplicate_tool_call_id")
    refused(c, cid, user_msg("u9", parent_id="u0"), "stale_parent")
    # appends that follow one being checked keep their order
    b = append(c, cid, [first, user_msg("n2")])
    append(c, cid, user_msg("n3"))
    check(log_ids(c, cid)[-3:] == ["n1", "n2", "n3"] and event_count(c, cid) == 306,
          "each new event once, in order", log_ids(c, cid)[-3:])
    if store():
        check(srv.loop_requests() == 0, "no loop thread waited for the cluster",
              srv.loop_requests())


def append_too_large(c):
    """An event larger than the store keeps for one (st_store_max_event: the
    cluster's max_payload less headers, about 1 MB; the local store's 256
    MiB) is refused with 413 and a one-line reason, alone or in an array,
    and the conversation goes on (it is not restarted)."""
    cid = new_conv(c)
    append(c, cid, user_msg("t1"))
    huge = user_msg("t2", say="z" * (1 << 20) + "y" * 200000)  # 1.2 MB
    for body in (huge, [user_msg("t3"), huge]):
        r = c.request("POST", conv_path(cid, "/events/append"), body=body)
        if not store():  # the local store keeps it: 201
            check(r.status == 201, "a 1.2 MB event on the local store: 201", r.status)
            return
        d = (r.body or {}).get("detail", "")
        check(r.status == 413 and "more than the store keeps for one event" in d
              and "\n" not in d, "a 1.2 MB event on the cluster: 413 with a reason", r.status, d)
        check(("event 1 is" in d) == isinstance(body, list), "the reason names the event", d)
    append(c, cid, user_msg("t4"))
    check(log_ids(c, cid) == ["t1", "t4"], "nothing of the refused appends is in the log")


def append_invalid(c):
    cid = new_conv(c)
    append(c, cid, user_msg("u1"))
    bad_events = [
        {"id": "x1", "source": "agent", "kind": "NoSuchEvent"},
        {"id": "x2", "source": "agent", "llm_message": {"role": "assistant", "content": []}},
        {k: v for k, v in action("x3", "c9", "r9").items() if k != "tool_call_id"},
        {k: v for k, v in user_msg("x4").items() if k != "llm_message"},
        dict(user_msg("x5"), seq=7),
        dict(user_msg("x6"), conversation_id="abc"),
        dict(user_msg("x7"), source="robot"),
        dict(observation("x8", "c9"), tool_call_id=5),
        user_msg("x9", kind="MessageEvent", llm_message={"role": "wizard", "content": []}),
        {"id": "x10", "source": "agent", "content": "delta", "kind": "StreamingDeltaEvent"},
        42, "event", None, [],
    ]
    for ev in bad_events:
        r = c.request("POST", conv_path(cid, "/events/append"), body=ev)
        check(r.status == 422 and isinstance(r.body, dict) and "detail" in r.body,
              "invalid event %s: 422 {detail}" % json.dumps(ev)[:80], r)
    for raw in (b"{", b"", b'{"id": "x11", "source": "user", "kind": "Message'):
        r = c.request("POST", conv_path(cid, "/events/append"), raw=raw)
        check(r.status in (400, 422) and "detail" in (r.body or {}), "unparsable %r" % raw, r)
    # an array with one invalid event: nothing of it goes in
    arr = [user_msg("y1"), action("y2", "c1", "r1"), dict(observation("y3", "c1"), extra=1)]
    r = c.request("POST", conv_path(cid, "/events/append"), body=arr)
    check(r.status == 422 and "detail" in (r.body or {}), "an array with an invalid event: 422",
          r)
    check(log_ids(c, cid) == ["u1"], "nothing of the array is in the log")
    for eid in ("y1", "y2", "y3"):
        check(c.get(conv_path(cid, "/events/" + eid)).status == 404, eid + " is not there")
    # an array with an event the gate refuses: nothing of it goes in either
    arr = [user_msg("z1"), action("z2", "c1", "r1"), agent_msg("z3", "too soon")]
    b = append(c, cid, arr, 409)
    check(b.get("rule") == "interleaved_message", "the array is refused by its worst event", b)
    arr = [action("w1", "c1", "r1"), user_msg("w2", say="while pending")]
    r = c.request("POST", conv_path(cid, "/events/append"), body=arr)
    check(r.status == 409, "an array with a message that would be deferred is refused whole", r)
    check(log_ids(c, cid) == ["u1"], "nothing of the refused arrays is in the log")
    for ev in [user_msg("z1"), action("z2", "c1", "r1"), agent_msg("z3", "too soon"),
               action("w1", "c1", "r1"), user_msg("w2", say="while pending")]:
        note_refused(cid, ev)
    # and the conversation still works
    b = append(c, cid, [action("a1", "c1", "r1"), observation("t1", "c1")])
    check([e["index"] for e in b["events"]] == [1, 2], "appends go on at the next index", b)


def gate_interleaved_message(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), action("a1", "c1", "r1")])
    b = refused(c, cid, agent_msg("m1", "The command is running...", "r2"), "interleaved_message",
                ["c1"])
    check("m1" in b["detail"] and "interleaved_message" in b["detail"], "the detail says why", b)
    append(c, cid, observation("t1", "c1"))
    b = append(c, cid, agent_msg("m1", "The command ran", "r2"))
    check(b["events"][0]["index"] == 3, "a refused id is free to use once the call is answered")
    check(log_ids(c, cid) == ["u1", "a1", "t1", "m1"], "the log")


def gate_interleaved_action(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), action("a1", "c1", "r1")])
    refused(c, cid, action("a2", "c2", "r2", "pwd"), "interleaved_action", ["c1"])
    append(c, cid, action("a3", "c3", "r1", "pwd"))  # same response: a parallel call
    append(c, cid, [observation("t1", "c1"), observation("t3", "c3")])
    append(c, cid, action("a4", "c2", "r2", "pwd"))  # a new turn once all are answered
    check(log_ids(c, cid) == ["u1", "a1", "a3", "t1", "t3", "a4"], "the log")


def gate_duplicate_tool_call_id(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), action("a1", "c1", "r1")])
    refused(c, cid, action("a2", "c1", "r1", "pwd"), "duplicate_tool_call_id", ["c1"])
    append(c, cid, observation("t1", "c1"))
    refused(c, cid, action("a3", "c1", "r3", "pwd"), "duplicate_tool_call_id", [])
    check(log_ids(c, cid) == ["u1", "a1", "t1"], "the log")


def gate_unmatched_tool_result(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), agent_msg("m1", "I will look.", "r1")])
    refused(c, cid, observation("t1", "call_nonexistent_xyz"), "unmatched_tool_result", [])
    refused(c, cid, agent_error("t2", "call_nonexistent_xyz"), "unmatched_tool_result")
    refused(c, cid, user_reject("t3", "call_nonexistent_xyz"), "unmatched_tool_result")
    # a result for another call than the pending one
    append(c, cid, action("a1", "c1", "r2"))
    refused(c, cid, observation("t4", "c2"), "unmatched_tool_result", ["c1"])
    # results before their actions, with no parent to wait for (a08)
    append(c, cid, observation("t5", "c1"))
    refused(c, cid, observation("t6", "call_sf"), "unmatched_tool_result")
    refused(c, cid, observation("t7", "call_tokyo"), "unmatched_tool_result")
    append(c, cid, [action("a2", "call_sf", "r3"), action("a3", "call_tokyo", "r3")])
    check(log_ids(c, cid) == ["u1", "m1", "a1", "t5", "a2", "a3"], "the log")


def gate_duplicate_tool_result(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), action("a1", "c1", "r1"), observation("t1", "c1"),
                    user_msg("u2", say="Thanks"), agent_msg("m1", "You're welcome", "r2")])
    refused(c, cid, observation("t2", "c1"), "duplicate_tool_result", [])
    refused(c, cid, agent_error("t3", "c1"), "duplicate_tool_result")
    refused(c, cid, user_reject("t4", "c1"), "duplicate_tool_result")
    # the earlier call named while a later one is pending (a06)
    append(c, cid, action("a2", "c2", "r3", "pwd"))
    refused(c, cid, observation("t5", "c1"), "duplicate_tool_result", ["c2"])
    append(c, cid, agent_error("t6", "c2"))  # an error answers a call too
    check(log_ids(c, cid) == ["u1", "a1", "t1", "u2", "m1", "a2", "t6"], "the log")


def gate_parallel_calls(c):
    cid = new_conv(c)
    append(c, cid, user_msg("u1"))
    for i in (1, 2, 3):
        append(c, cid, action("a%d" % i, "c%d" % i, "r1", "cmd%d" % i))
    append(c, cid, observation("t3", "c3"))
    append(c, cid, user_reject("t1", "c1"))
    refused(c, cid, agent_msg("m0", "early", "r2"), "interleaved_message", ["c2"])
    refused(c, cid, action("a4", "c4", "r2"), "interleaved_action", ["c2"])
    append(c, cid, observation("t2", "c2"))
    append(c, cid, agent_msg("m1", "ok", "r2"))
    check(log_ids(c, cid) == ["u1", "a1", "a2", "a3", "t3", "t1", "t2", "m1"], "the log")


def gate_stale_parent(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), agent_msg("m1", "hello", "r1")])
    refused(c, cid, user_msg("u2", parent_id="u1"), "stale_parent")
    b = append(c, cid, user_msg("u3", parent_id="m1"))
    check(b["events"][0]["index"] == 2, "the head as parent is fine", b)
    # a state update is no tree node: the head stays u3
    c.expect("POST", conv_path(cid, "/run"), 200)
    append(c, cid, agent_msg("m2", "reply", "r2", parent_id="u3"))
    check(log_ids(c, cid)[-1] == "m2", "the log")


def gate_deferred_message(c):
    cid = new_conv(c)
    append(c, cid, [user_msg("u1"), action("a1", "c1", "r1")])
    b = append(c, cid, user_msg("u2", say="Actually, show hidden files too"), 202)
    check(b.get("events") == [{"id": "u2"}] and isinstance(b.get("detail"), str),
          "202 {events: [{id}], detail}", b)
    check(c.get(conv_path(cid, "/events/u2")).status == 404, "a deferred message is not in the log")
    b = append(c, cid, user_msg("u2", say="Actually, show hidden files too"), 202)
    check(b.get("events") == [{"id": "u2"}], "its retry gets its 202 again", b)
    b = append(c, cid, user_msg("e1", say="env note", source="environment"), 202)
    c.expect("POST", conv_path(cid, "/events"), 200,
             {"role": "user", "content": text("posted while pending"), "run": False})
    check(event_count(c, cid) == 2, "nothing deferred is in the log yet")
    append(c, cid, observation("t1", "c1"))
    evs = wait_for("the deferred messages to commit",
                   lambda: (lambda e: e if len(e) == 6 else None)(all_events(c, cid)))
    check([e["id"] for e in evs[:5]] == ["u1", "a1", "t1", "u2", "e1"],
          "deferred messages commit after the result, in arrival order", [e["id"] for e in evs])
    check(evs[5]["llm_message"]["content"][0]["text"] == "posted while pending",
          "a SendMessageRequest is deferred too", evs[5])
    check(evs[3]["parent_id"] == "t1", "a deferred message commits after the head then", evs[3])
    b = append(c, cid, user_msg("u2", say="Actually, show hidden files too"))
    check(b.get("duplicate") is True and b["events"][0]["index"] == 3,
          "its retry now is a duplicate with its index", b)


def gate_hold_and_release(c, srv):
    """An observation whose parent (its action) is not in the log waits for
    it, and commits right after it."""
    cid = new_conv(c)
    append(c, cid, user_msg("u1"))
    obs = observation("t1", "c1", parent_id="a1")
    waiting = hold_one(srv, cid, obs)
    check(c.get(conv_path(cid, "/events/t1")).status == 404, "a held event is not in the log")
    b = append(c, cid, action("a1", "c1", "r1", parent_id="u1"))
    check(b["events"] == [{"id": "a1", "index": 1}], "the action commits", b)
    r = waiting.receive()
    check(r.status == 201 and r.body["events"] == [{"id": "t1", "index": 2}],
          "the held observation commits right after its action", r)
    b = append(c, cid, obs)
    check(b.get("duplicate") is True, "the post refused at once, retried, is a duplicate", b)
    check(log_ids(c, cid) == ["u1", "a1", "t1"], "the log")


def hold_one(srv, cid, ev):
    """Post ev, whose parent is not in the log, so that it is held; -> the
    client waiting for its answer. Needs --hold-max 1: of two posts of ev,
    the second to arrive is refused at once (503), so one is surely held
    once that answer is read, without timing anything."""
    first, second = srv.client(), srv.client()
    first.send("POST", conv_path(cid, "/events/append"), body=ev)
    second.send("POST", conv_path(cid, "/events/append"), body=ev)
    ready, _, _ = select.select([first.conn.sock, second.conn.sock], [], [], 60)
    check(ready, "one of two held posts must be refused at once (hold-max 1)")
    busy = first if first.conn.sock in ready else second
    r = busy.receive()
    check(r.status == 503 and isinstance(r.body.get("retry_after"), int)
          and "retry-after" in r.headers, "past --hold-max: 503 with retry_after", r)
    return second if busy is first else first


def sigterm_answers_held_append():
    """SIGTERM while a producer waits for its held event's parent: the
    producer gets an answer (refused: 409 or 503) at once, not when the
    grace for requests in flight runs out, and the server exits 0."""
    with Server(args=["--hold-max", "1", "--hold-timeout", "60s"]) as srv:
        c = srv.client()
        cid = new_conv(c)
        append(c, cid, user_msg("u1"))
        waiting = hold_one(srv, cid, observation("t1", "c1", parent_id="a1"))
        srv.clients.remove(waiting)  # stop() must not close it: we read its answer
        srv.terminate()
        try:
            r = waiting.receive()
        except (ConnectionError, OSError) as e:
            raise TestFailure("a held append must be answered when the server stops, got %r"
                              % e)
        check(r.status in (409, 503) and "detail" in (r.body or {}),
              "a held append is refused when the server stops", r)
        srv.proc.wait(60)
        check("still in flight" not in srv._stderr_text(),
              "refused at once, not after the grace for requests in flight",
              srv._stderr_text())


def gate_expiries(srv):
    """On a server with short --hold-timeout and --defer-timeout."""
    c = srv.client()
    cid = new_conv(c)
    append(c, cid, user_msg("u1"))
    # a held event whose parent never comes: 409 unknown_parent when the hold ends
    b = append(c, cid, observation("t1", "c1", parent_id="ghost"), 409)
    check(b.get("rule") == "unknown_parent" and b.get("event_id") == "t1",
          "hold expired: 409 unknown_parent", b)
    # a deferred message whose calls never complete: refused, and said in the log
    append(c, cid, action("a1", "c1", "r1"))
    append(c, cid, user_msg("u2", say="What was the result?"), 202)
    err = wait_for("the deferral to expire", lambda: [
        e for e in all_events(c, cid, kind="ConversationErrorEvent")
        if e.get("code") == "DeferredMessageExpired"])
    check(len(err) == 1 and "interleaved_message" in err[0]["detail"],
          "a ConversationErrorEvent says the message expired", err)
    ids = log_ids(c, cid)
    check(ids[:2] == ["u1", "a1"] and "u2" not in ids and "t1" not in ids, "the log", ids)
    return c, cid


def refused_never_seen(c):
    check(len(REFUSED) > 20, "the gate checks refused events", len(REFUSED))
    logs = {}
    for cid, ev in REFUSED:
        if cid not in logs:
            logs[cid] = {e["id"]: e for e in all_events(c, cid)}
            check(len(logs[cid]) == event_count(c, cid), "ids are unique in a log", cid)
        got = logs[cid].get(ev["id"])
        # an id refused once may be taken later by another event, never this one
        check(got is None or content(got) != content(ev),
              "a refused event is never in the log", cid, ev["id"])


# ------------------------------------------------------- compliance vectors ---


def vectors_dir():
    shared = os.environ.get("PARLEY_SHARED_DIR")
    if not shared:
        here = os.path.dirname(os.path.abspath(__file__))
        shared = os.path.join(here, "..", "..", "..", "shared")
    d = os.path.join(shared, "vectors", "compliance")
    check(os.path.isdir(d), "the shared test vectors are missing: %s" % d)
    return d


def replay_vectors(srv):
    """Every compliance vector, offered over HTTP on one conversation each.
    `restart` restarts the whole server on the same data directory."""
    d = vectors_dir()
    names = sorted(f for f in os.listdir(d) if f.endswith(".json"))
    check(len(names) >= 12, "the compliance vectors", names)
    cases = []
    for name in names:
        with open(os.path.join(d, name), encoding="utf-8") as f:
            v = json.load(f)
        c = srv.client()
        cid = new_conv(c, title=v["name"])
        seen, committed, waits = {}, set(), []
        expect = v["expect"]
        deferred = set(expect.get("deferred", []))
        rejected = expect.get("rejected", {})
        for step in v["steps"]:
            if step.get("restart"):
                check(not waits, "%s: no vector holds an event across a restart" % name)
                srv.restart()
                c = srv.client()
                continue
            ev = step["append"]
            seen[ev["id"]] = seen.get(ev["id"], 0) + 1
            key = ev["id"] if seen[ev["id"]] == 1 else "%s#%d" % (ev["id"], seen[ev["id"]])
            parent = ev.get("parent_id")
            if parent and parent not in committed:
                w = srv.client()  # held: its answer comes when the parent commits
                w.send("POST", conv_path(cid, "/events/append"), body=ev)
                waits.append((key, w))
                committed.add(ev["id"])
                continue
            r = c.request("POST", conv_path(cid, "/events/append"), body=ev)
            if key in deferred:
                check(r.status == 202, "%s: %s is deferred: 202" % (name, key), r)
            elif key in rejected:
                check(r.status == 409 and r.body.get("rule") == rejected[key],
                      "%s: %s is refused: 409 %s" % (name, key, rejected[key]), r)
            else:
                check(r.status == 201, "%s: %s is accepted: 201" % (name, key), r)
                committed.add(ev["id"])
        for key, w in waits:
            r = w.receive()
            if key in rejected:
                check(r.status == 409 and r.body.get("rule") == rejected[key],
                      "%s: held %s: 409 %s" % (name, key, rejected[key]), r)
            else:
                check(r.status == 201, "%s: held %s commits" % (name, key), r)
        expired = [k for k in deferred if k in rejected]
        cases.append((name, cid, expect, expired, {e["append"]["id"] for e in v["steps"]
                                                   if "append" in e}))
    c = srv.client()
    for name, cid, expect, expired, vids in cases:
        if expired:  # deferrals that expire are said in the log
            # (GET the info: after a restart, a conversation's deferrals only
            # run out once something opens it, and reading events does not)
            wait_for("%s: deferrals to expire" % name, lambda: c.get(conv_path(cid)) and
                     event_count(c, cid, kind="ConversationErrorEvent") >= len(expired))
        evs = all_events(c, cid)
        got = [e["id"] for e in evs if e["id"] in vids]
        check(got == expect["log"], "%s: the log" % name, got, expect["log"])
        others = [e for e in evs if e["id"] not in vids]
        check(all(e["kind"] == "ConversationErrorEvent" for e in others) and
              len(others) == len(expired), "%s: only expiry errors besides" % name, others)


# ---------------------------------------------------------------- 6. restart ---


def restart_keeps_everything(srv):
    c = srv.client()
    a = new_conv(c, title="alpha", tags={"team": "x"})
    c.expect("PATCH", conv_path(a), 200, {"title": "alpha 2", "tags": {"team": "y"}})
    append(c, a, [user_msg("u1"), action("a1", "c1", "r1"), observation("t1", "c1"),
                  agent_msg("m1", "done", "r2")])
    b = new_conv(c, title="beta")
    append(c, b, user_msg("u1"))
    c.expect("POST", conv_path(b, "/pause"), 200)
    f = new_conv(c, title="finished one")
    c.expect("POST", conv_path(f, "/run"), 200)
    append(c, f, {"source": "environment", "key": "execution_status", "value": "finished",
                  "kind": "ConversationStateUpdateEvent"})
    big = new_conv(c, title="big")
    for i in range(0, 150, 50):
        append(c, big, [user_msg("b%d" % j, say="msg %d" % j) for j in range(i, i + 50)])
    # gate state: a pending call, and a message deferred behind it
    p = new_conv(c, title="pending")
    append(c, p, [user_msg("u1"), action("a1", "c1", "r1")])
    append(c, p, user_msg("u2", say="deferred across the restart"), 202)
    # a run in progress when the server stops is lost (spec 2.4, 7.12)
    run_ = new_conv(c, title="running")
    append(c, run_, [user_msg("u1"), action("a1", "c1", "r1")])
    c.expect("POST", conv_path(run_, "/run"), 200)
    ws = {"kind": "LocalWorkspace", "working_dir": "/tmp/restart-work"}
    mom = c.expect("POST", "/api/conversations", 201, {"workspace": ws})["id"]
    kid = c.expect("POST", "/api/conversations", 201,
                   {"workspace": ws, "parent_conversation_id": mom})["id"]
    # findings are counted from the log again after the restart
    obs = new_conv(c, title="observed", compliance_policy="observe")
    append(c, obs, [action("a1", "c1", "r1"), agent_msg("m1", "too soon", "r2")])
    wait_for("the violation", lambda: c.expect("GET", conv_path(obs), 200)["violations"] == 1)
    st = new_conv(c, title="stuck")
    append(c, st, user_msg("u1", say="list the files"))
    stuck_turns(c, st, 1, 4)
    stuck_settled(c, st)
    convs = [a, b, f, big, p, mom, kid, obs, st]
    before = {x: c.expect("GET", conv_path(x), 200) for x in convs}
    check(before[mom]["sub_conversation_ids"] == [kid], "a parent and its child", before[mom])
    events = {x: all_events(c, x) for x in convs}
    listing = walk_conversations(c, 100)
    check((before[obs]["violations"], before[st]["stuck_findings"]) == (1, 1),
          "findings before", before[obs], before[st])
    check(before[big]["event_count"] == 150, "event_count before", before[big])
    check(before[b]["execution_status"] == "paused" and
          before[f]["execution_status"] == "finished", "statuses before", before)

    srv.restart()  # SIGTERM, exit 0, then the same --data again
    c = srv.client()

    for x in convs:
        got = c.expect("GET", conv_path(x), 200)
        check(got == before[x], "the conversation's info survives a restart", got, before[x])
        check(all_events(c, x) == events[x], "its events survive, same ids, same order")
    after = walk_conversations(c, 100)
    check([i["id"] for i in after] == [i["id"] for i in listing], "the search is the same")
    check([i for i in after if i["id"] != run_] == [i for i in listing if i["id"] != run_],
          "with the same infos")
    check(int(c.get("/api/conversations/count").raw) == len(listing), "the count is the same")
    check(c.expect("GET", conv_path(a), 200)["title"] == "alpha 2", "title")
    check(status_of(c, run_) == "error", "a conversation running at the stop is in error")
    # nothing is answered about it before its recovery is in the log
    evs = all_events(c, run_)
    check([e["id"] for e in evs[:2]] == ["u1", "a1"], "its events are kept", evs)
    errs = [e for e in evs if e["kind"] == "AgentErrorEvent"]
    check(len(errs) == 1 and errs[0]["tool_call_id"] == "c1",
          "an AgentErrorEvent answers the call that was in progress", evs)
    states = [e["value"] for e in evs if e.get("key") == "execution_status"]
    check(states == ["running", "error"], "an execution_status event says error", states)
    append(c, run_, agent_msg("m1", "the call is answered", "r2"))
    r = append(c, big, user_msg("b150"))
    check(r["events"] == [{"id": "b150", "index": 150}], "appends go on at the next index", r)
    r = append(c, a, user_msg("u1", say="hello"))
    check(r.get("duplicate") is True, "ids from before are known", r)
    refused(c, p, agent_msg("m9", "too soon", "r2"), "interleaved_message", ["c1"])
    append(c, p, observation("t1", "c1"))
    evs = wait_for("the deferred message to commit after the restart",
                   lambda: (lambda e: e if len(e) == 4 else None)(all_events(c, p)))
    check([e["id"] for e in evs] == ["u1", "a1", "t1", "u2"], "the deferred message survived",
          [e["id"] for e in evs])


# ------------------------------------------------------------- connections ---

def home_loop(cid, loops):
    """The worker loop a conversation lives on, as actors/convs.c's loop_of
    says: its id's first 8 bytes (little-endian), folded, modulo the loops."""
    h = int.from_bytes(bytes.fromhex(cid.replace("-", ""))[:8], "little")
    return (h ^ (h >> 31)) % loops


def connection_moves_to_its_conversations(c, srv):
    """A keep-alive connection whose requests ask conversations of another
    loop (appends, not reads) moves there between two requests
    (net/conn.c), as often as they change loop; none of its requests is
    lost, repeated or refused, and the connection stays open throughout."""
    loops = c.expect("GET", "/server_info", 200)["workers"]
    check(loops >= 2, "the server runs several worker loops", loops)
    by_loop = {}
    for _ in range(1000):  # ids whose conversations live on loops 0 and 1
        cid = str(uuid.uuid4())
        by_loop.setdefault(home_loop(cid, loops), cid)
        if 0 in by_loop and 1 in by_loop:
            break
    x, y = by_loop[0], by_loop[1]
    for cid in (x, y):
        c.expect("POST", "/api/conversations", 201, {"conversation_id": cid})
    moved = metric(c.get("/metrics").raw.decode(), "parley_http_connections_moved_total")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    for cid in (x, y):  # reads are served where the connection is: they never move it
        for _ in range(6):
            conn.request("GET", conv_path(cid, "/events/search?limit=5"))
            r = conn.getresponse()
            check(r.status == 200, "a read on the connection", (r.status, r.read()[:200]))
            r.read()
    after = metric(c.get("/metrics").raw.decode(), "parley_http_connections_moved_total")
    check(after == moved, "reads did not move it", (moved, after))
    sent = {x: [], y: []}
    try:
        for rnd, cid in enumerate((x, y, x)):  # 5 in a row each: it moves after 4
            for i in range(5):
                eid = "mv-%d-%d" % (rnd, i)
                conn.request("POST", conv_path(cid, "/events/append"),
                             body=json.dumps(user_msg(eid)),
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                body = r.read()
                check(r.status == 201 and not r.will_close,
                      "append %s on the moving connection: 201, kept open" % eid,
                      (r.status, body[:200]))
                sent[cid].append(eid)
        # a pipelined pair on it, once it has moved
        path = conv_path(x, "/events/count")
        conn.sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode() * 2)
        f = conn.sock.makefile("rb")
        for _ in range(2):
            status = f.readline().split()[1]
            length = 0
            for line in iter(f.readline, b"\r\n"):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = f.read(length)
            check(status == b"200" and json.loads(body) == 10, "a pipelined count",
                  (status, body))
        f.close()
    finally:
        conn.close()
    after = metric(c.get("/metrics").raw.decode(), "parley_http_connections_moved_total")
    check(after >= moved + 2, "it moved to x's loop, y's, then x's again", (moved, after))
    for cid, want in sent.items():
        check(log_ids(c, cid) == want, "each conversation has its appends once, in order",
              (log_ids(c, cid), want))


# ------------------------------------------------------------------ runner ---

def metric(text, name):
    """The value of one sample line of a Prometheus text (0 if absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def prometheus_metrics(c):
    """/metrics: open, Prometheus text, and it counts what this server did."""
    r = c.request("GET", "/metrics")
    check(r.status == 200 and r.headers.get("content-type", "").startswith("text/plain"),
          "GET /metrics: 200 text/plain", r)
    before = r.raw.decode()
    cid = new_conv(c)
    append(c, cid, user_msg("mu1"))
    refused(c, cid, observation("mt1", "nope"), "unmatched_tool_result")
    after = c.request("GET", "/metrics").raw.decode()
    for name in ("parley_events_appended_total",
                 'parley_events_rejected_total{rule="unmatched_tool_result"}',
                 'parley_http_requests_total{route="/api/conversations/{c}/events/append",'
                 'status="409"}',
                 'parley_http_requests_total{route="/api/conversations",status="201"}',
                 # what a durable append waits for: an fdatasync, or a cluster's ack
                 "parley_nats_append_seconds_count" if store() else "parley_fsync_seconds_count"):
        check(metric(after, name) >= metric(before, name) + 1, "%s went up" % name,
              (metric(before, name), metric(after, name)))
    check(metric(after, "parley_http_connections") >= 1, "open connections counted", after[-400:])
    check(metric(after, "parley_conversations_open") >= 1, "open conversations counted",
          after[-400:])
    for line in after.splitlines():  # every sample line is "name{labels} number"
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def main():
    t0 = time.monotonic()
    hold_args = ["--hold-max", "1", "--hold-timeout", "60s", "--defer-timeout", "60s"]
    with serving("main_server_stops_cleanly", args=hold_args) as srv:
        c = srv.client()
        # 1. open routes
        run("alive_health_ready_info", alive_health_ready_info, c)
        run("prometheus_metrics", prometheus_metrics, c)
        run("unknown_path_404", unknown_path_404, c)
        run("openapi_description", openapi_description, c)
        run("wrong_method_405", wrong_method_405, c)
        # 3. conversations
        for fn in (create_defaults, create_with_given_id, create_fields_stored,
                   secrets_not_echoed, include_skills, create_bad_requests, title_counts_characters,
                   create_with_initial_message, get_conversation, get_many, search_conversations,
                   count_conversations, status_filter, lists_follow, patch_conversation, run_pause_interrupt,
                   pause_when_paused, conversation_delete, parent_and_children,
                   conversation_findings):
            run(fn.__name__, fn, c)
        # 4. events
        run("post_message", post_message, c)
        run("event_shape", event_shape, c)
        big = make_big(c)
        for fn in (search_order_and_limits, search_paging, search_filters, timestamp_filters,
                   get_event, batch_get_events):
            run(fn.__name__, fn, c, big)
        run("unknown_conversation_events", unknown_conversation_events, c)
        # 5. the producer route and the gate
        for fn in (append_single_and_array, append_duplicates, append_invalid,
                   append_too_large,
                   gate_interleaved_message, gate_interleaved_action,
                   gate_duplicate_tool_call_id, gate_unmatched_tool_result,
                   gate_duplicate_tool_result, gate_parallel_calls, gate_stale_parent,
                   gate_deferred_message):
            run(fn.__name__, fn, c)
        run("gate_hold_and_release", gate_hold_and_release, c, srv)
        run("retries_beyond_the_tail", retries_beyond_the_tail, c, srv)
        run("refused_never_seen", refused_never_seen, c)
        run("patch_concurrent", patch_concurrent, srv)
        run("connection_moves_to_its_conversations", connection_moves_to_its_conversations, c,
            srv)

    run("sigterm_answers_held_append", sigterm_answers_held_append)

    # holds and deferrals that expire
    with serving("expiry_server_stops_cleanly",
                 args=["--hold-timeout", "300ms", "--defer-timeout", "300ms"]) as srv:
        run("gate_expiries", gate_expiries, srv)

    # the compliance vectors over HTTP, with real restarts
    vargs = ["--hold-timeout", "2s", "--defer-timeout", "1s"]
    with serving("vector_server_stops_cleanly", args=vargs) as srv:
        run("replay_vectors", replay_vectors, srv)

    # 2. auth: --api-key, and $SESSION_API_KEY
    key = "k3y-Secret-0123456789"
    with serving("auth_server_stops_cleanly", api_key=key) as srv:
        run("auth_api_key_flag", auth_checks, srv, key)
    keys = ["first-key-1", "second-key-2"]
    with serving("several_keys_server_stops_cleanly",
                 args=["--api-key", keys[0], "--api-key", keys[1]]) as srv:
        srv.api_key = keys[0]
        run("auth_several_keys", auth_several_keys, srv, keys)
    with serving("env_auth_server_stops_cleanly", env={"SESSION_API_KEY": key}) as srv:
        srv.api_key = key  # the client sends it; the server got it from the environment
        run("auth_session_api_key_env", auth_checks, srv, key)

    # 6. restart on the same data directory
    with serving("restarted_server_stops_cleanly", args=hold_args) as srv:
        run("restart_keeps_everything", restart_keeps_everything, srv)

    return summary(t0)


if __name__ == "__main__":
    sys.exit(main())
