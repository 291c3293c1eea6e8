#!/usr/bin/python3
"""acp_host_test.py - hosted agents: `parley serve --agent ...` runs real ACP
agents (tests/node/acp_agent.mjs, built on the official SDK, one behaviour
per registered name; `parley demo-agent`; commands that die or are not
there) and the tests read what they did from the conversation's log.

Run by test_acp_host.sh (ctest sets $PARLEY). Every log a test leaves is
checked with `parley lint` at the end. Waits poll the API against a
deadline; nothing sleeps to synchronize.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from parley_client import TestFailure, check, run, serving, summary, wait_for  # noqa: E402

AGENT = os.path.abspath(os.path.join(HERE, "..", "node", "acp_agent.mjs"))
BEHAVIOURS = ["echo", "full", "parallel", "permission", "cancel", "crash", "crash-load",
              "interleave", "loop-error", "unknown-result", "flood", "bigline", "badjson",
              "badrpc", "fs", "fs-burst", "secrets", "stop-refusal", "stop-max_tokens",
              "stop-max_turn_requests"]


def agent_args():
    args = []
    for b in BEHAVIOURS:
        args += ["--agent", "%s=node '%s' %s" % (b, AGENT, b)]
    args += ["--agent", "demo='%s' demo-agent" % os.environ["PARLEY"],
             "--agent", "dead=sh -c 'exit 7'",
             "--agent", "missing=/nonexistent/parley-agent"]
    return args


# ------------------------------------------------------------- helpers ---

def conv_path(cid, rest=""):
    return "/api/conversations/" + cid + rest


def text(t):
    return [{"type": "text", "text": t}]


def hosted(c, agent, say=None, **body):
    """A conversation hosting `agent`, and its first message (run) if said."""
    b = {"agent": {"kind": "ACPAgent", "acp_command": [agent]}}
    b.update(body)
    if say is not None:
        b["initial_message"] = {"role": "user", "content": text(say)}
    info = c.expect("POST", "/api/conversations", 201, b)
    check(info["agent"] == b["agent"], "the info shows the hosted agent", info)
    return info["id"]


def events(c, cid):
    out, page = [], None
    while True:
        q = "?limit=100" + ("&page_id=" + page if page else "")
        b = c.expect("GET", conv_path(cid, "/events/search" + q), 200)
        out += b["items"]
        page = b.get("next_page_id")
        if not page:
            return out


def status(c, cid):
    return c.expect("GET", conv_path(cid), 200)["execution_status"]


def logged_status(evs):
    """The status the log says last."""
    st = [e["value"] for e in evs if e["kind"] == "ConversationStateUpdateEvent" and
          e.get("key") == "execution_status"]
    return st[-1] if st else "idle"


def settle(c, cid, want=("finished",), timeout=60):
    """Wait until the log says one of the statuses want (failing if it
    settles on another); the events then. The log, not the info: the info
    says what the conversation accepted, the log what is durable."""
    last = []

    def settled():
        last[:] = events(c, cid)
        st = logged_status(last)
        return last if st in want or st in ("error", "stuck", "paused") else None
    try:
        evs = wait_for("%s to be %s" % (cid, "/".join(want)), settled, timeout)
    except TestFailure as e:
        raise TestFailure("%s; the log: %s" % (e, summarize(last)[-12:])) from None
    check(logged_status(evs) in want, "status %s, wanted %s" % (logged_status(evs),
                                                                "/".join(want)), summarize(evs))
    return evs


def say(c, cid, t, run_=True):
    c.expect("POST", conv_path(cid, "/events"), 200,
             {"role": "user", "content": text(t), "run": run_})


def summarize(evs):
    out = []
    for e in evs:
        k = e["kind"]
        extra = e.get("tool_call_id") or e.get("value") or e.get("code") or ""
        if k == "MessageEvent":
            extra = "%s: %s" % (e["source"], msg_text(e))
        out.append("%s %s" % (k, extra))
    return out


def msg_text(e):
    return "".join(p.get("text", "") for p in e["llm_message"].get("content") or [])


def of_kind(evs, kind, **fields):
    return [e for e in evs if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def agent_says(evs):
    return [msg_text(e) for e in of_kind(evs, "MessageEvent", source="agent")]


def error_codes(evs):
    return [e["code"] for e in of_kind(evs, "ConversationErrorEvent")]


def after_run(evs):
    """The events after the user's first message and the run."""
    i = next(i for i, e in enumerate(evs) if e.get("value") == "running")
    return evs[i + 1:]


# --------------------------------------------------------------- turns ---

def full_turn(c):
    cid = hosted(c, "full", "fix the typo")
    evs = settle(c, cid)
    check([e["kind"] for e in after_run(evs)] ==
          ["ActionEvent", "ObservationEvent", "ActionEvent", "ObservationEvent", "ActionEvent",
           "ObservationEvent", "MessageEvent", "ConversationStateUpdateEvent"],
          "the turn's events, in order", summarize(evs))
    acts = of_kind(evs, "ActionEvent")
    check([a["tool_call_id"] for a in acts[:2]] == ["call-1-1", "call-1-2"],
          "toolCallIds kept as the agent gave them", acts)
    check(len({a["llm_response_id"] for a in acts}) == 1, "one response id for the turn's calls")
    check(acts[0]["tool_name"] == "execute" and acts[0]["summary"] == "$ ls", "kind and title",
          acts[0])
    check(acts[0]["thought"][0]["text"] == "Let me look at the files. Then I will fix the typo.",
          "the thoughts before a call are its thought", acts[0])
    check(json.loads(acts[0]["tool_call"]["arguments"]) == {"command": "ls"}, "rawInput",
          acts[0])
    obs = of_kind(evs, "ObservationEvent")
    check(obs[0]["action_id"] == acts[0]["id"] and obs[0]["tool_call_id"] == "call-1-1",
          "an observation answers its action", obs[0])
    check(obs[0]["observation"]["content"][0]["text"] == "file1.txt\nfile2.txt",
          "the call's content as text", obs[0])
    check(acts[2]["tool_name"] == "plan" and
          [x["content"] for x in acts[2]["action"]["entries"]] ==
          ["List the files", "Fix the typo in file1.txt"], "the plan", acts[2])
    check(agent_says(evs) == ["I listed the files and fixed the typo in file1.txt."],
          "three chunks, one message", agent_says(evs))
    # a second message: a second turn on the same session
    say(c, cid, "again")
    evs = settle(c, cid)
    check("call-2-1" in [a["tool_call_id"] for a in of_kind(evs, "ActionEvent")],
          "the second turn's calls", summarize(evs))
    check(len(agent_says(evs)) == 2, "two replies", agent_says(evs))
    lint(c, cid)


def parallel_calls(c):
    cid = hosted(c, "parallel", "read both")
    evs = after_run(settle(c, cid))
    check([(e["kind"], e.get("tool_call_id")) for e in evs[:4]] ==
          [("ActionEvent", "call-1-a"), ("ActionEvent", "call-1-b"),
           ("ObservationEvent", "call-1-b"), ("ObservationEvent", "call-1-a")],
          "two calls before either result, the second done first", summarize(evs))
    check(evs[0]["llm_response_id"] == evs[1]["llm_response_id"], "one turn, one response id")
    check(agent_says(evs) == ["both files read"], "the reply", agent_says(evs))
    lint(c, cid)


def permission_never_confirm(c):
    cid = hosted(c, "permission", "clean up")
    evs = settle(c, cid)
    check(agent_says(evs) == ["allowed"], "NeverConfirm (the default): allowed at once",
          summarize(evs))
    check("waiting_for_confirmation" not in [e.get("value") for e in evs], "no wait",
          summarize(evs))
    lint(c, cid)


def permission_confirmed(c):
    cid = hosted(c, "permission", "clean up", confirmation_policy={"kind": "AlwaysConfirm"})
    settle(c, cid, ("waiting_for_confirmation",))
    c.expect("POST", conv_path(cid, "/events/respond_to_confirmation"), 200, {"accept": True})
    evs = settle(c, cid)
    check(agent_says(evs) == ["allowed"], "accepted: the agent went on", summarize(evs))
    check(of_kind(evs, "ObservationEvent", tool_call_id="call-1-1"), "the call's result",
          summarize(evs))
    lint(c, cid)


def permission_rejected(c):
    cid = hosted(c, "permission", "clean up", confirmation_policy={"kind": "AlwaysConfirm"})
    settle(c, cid, ("waiting_for_confirmation",))
    c.expect("POST", conv_path(cid, "/events/respond_to_confirmation"), 200,
             {"accept": False, "reason": "not that one"})
    # the rejection leaves it idle, the agent's turn goes on and ends: in
    # whichever order the agent's end of turn and the rejection's idle reach
    # the adapter, the log ends running, then finished
    settle(c, cid, ("finished",))
    evs = wait_for("the agent to hear the rejection",
                   lambda: (lambda e: e if agent_says(e) == ["rejected"] else None)(
                       events(c, cid)), 60)
    check(logged_status(evs) == "finished", "it ends finished", summarize(evs))
    rej = of_kind(evs, "UserRejectObservation")
    check(len(rej) == 1 and rej[0]["tool_call_id"] == "call-1-1" and
          rej[0]["rejection_reason"] == "not that one", "the user's rejection answers the call",
          summarize(evs))
    check(not of_kind(evs, "AgentErrorEvent") and not of_kind(evs, "ObservationEvent"),
          "nothing else answers it", summarize(evs))
    check(agent_says(evs) == ["rejected"], "the agent heard the rejection", summarize(evs))
    r = c.request("POST", conv_path(cid, "/events/respond_to_confirmation"), {"accept": "yes"})
    check(r.status == 422, "accept must be a boolean: 422", r)
    lint(c, cid)


def pause_cancels(c):
    cid = hosted(c, "cancel", "wait")
    wait_for("the agent's call", lambda: of_kind(events(c, cid), "ActionEvent"))
    c.expect("POST", conv_path(cid, "/pause"), 200)
    evs = settle(c, cid, ("paused",))
    wait_for("the cancelled call's error",
             lambda: of_kind(events(c, cid), "AgentErrorEvent", tool_call_id="call-1-1"))
    evs = events(c, cid)
    check(status(c, cid) == "paused", "a cancelled turn leaves it paused", summarize(evs))
    check(of_kind(evs, "PauseEvent"), "the pause is in the log")
    c.expect("POST", conv_path(cid, "/run"), 200)
    settle(c, cid)  # nothing more to answer: finished
    lint(c, cid)


def crash_restarts(c, agent):
    cid = hosted(c, agent, "hello again")
    evs = settle(c, cid)
    errs = of_kind(evs, "AgentErrorEvent")
    check(len(errs) == 1 and errs[0]["tool_call_id"] == "call-1-1" and
          "exited with status 3" in errs[0]["error"],
          "the call the crash left open is answered", summarize(evs))
    check(agent_says(evs) == ["hello again"], "restarted and prompted again", summarize(evs))
    check(len(of_kind(evs, "ActionEvent")) == 1, "nothing twice (a loaded session's replay "
          "is history, not news)", summarize(evs))
    lint(c, cid)


def crash_gives_up(c):
    ends_in_error(c, "dead", "anyone?", "AgentCrashed", ("exited with status 7", "given up"),
                  "given up after its restarts")


def missing_command(c):
    ends_in_error(c, "missing", "anyone?", "AgentStartFailed", "/nonexistent/parley-agent",
                  "the agent could not start, and the log says why")


def not_registered(c):
    n = int(c.get("/api/conversations/count").raw)
    for agent, why in (({"kind": "ACPAgent", "acp_command": ["nope"]}, "registered"),
                       ({"kind": "ACPAgent", "acp_command": ["rm", "-rf", "/"]}, "registered"),
                       ({"kind": "ACPAgent"}, "acp_command"),
                       ({"acp_command": ["echo"]}, "kind")):
        r = c.post("/api/conversations", {"agent": agent})
        check(r.status == 422 and why in r.body["detail"], "%r: 422 saying why" % agent, r)
    check(int(c.get("/api/conversations/count").raw) == n, "nothing was created")


# --------------------------------------------------------- rule breakers ---

def interleaved_message(c):
    evs = ends_in_error(c, "interleave", "build", "AgentBrokeToolCallRules",
                        "interleaved_message", "the refusal is said")
    check(agent_says(evs) == [], "the refused message is not in the log", summarize(evs))
    check(not any(e.get("rule") for e in evs), "only accepted events")


def interleaved_observed(c):
    cid = hosted(c, "interleave", "build", compliance_policy="observe")
    evs = settle(c, cid)
    check(agent_says(evs) == ["while pending"], "observe: appended", summarize(evs))
    check("ComplianceViolation" in error_codes(evs), "and recorded", summarize(evs))
    lint(c, cid, "observe")


def unknown_result(c):
    ends_in_error(c, "unknown-result", "go", "AgentBrokeToolCallRules", "unmatched_tool_result",
                  "a result for a call never made is refused")


def stuck_agent(c):
    cid = hosted(c, "loop-error", "read it")
    evs = settle(c, cid, ("stuck",))
    nudges = of_kind(evs, "MessageEvent", source="environment")
    check(len(nudges) == 1, "one nudge, prompted as the next turn", summarize(evs))
    check("StuckPatternDetected" in error_codes(evs), "then stuck", summarize(evs))
    first_after = evs.index(nudges[0]) + 1
    check(of_kind(evs[first_after:], "ActionEvent"), "the nudge was prompted", summarize(evs))
    # the cancel that stuck sends ends the agent's turn after the status:
    # the call it was making is closed then
    wait_for("every call of %s answered" % cid, lambda: not pending_calls(events(c, cid)))
    lint(c, cid, stuck=True)


def pending_calls(evs):
    return {a["tool_call_id"] for a in of_kind(evs, "ActionEvent")} - {
        e["tool_call_id"] for e in evs if e["kind"] in ("ObservationEvent", "AgentErrorEvent")}


def protocol_breakers(c):
    for agent, code, why in (("bigline", "AgentProtocolError", "16 MiB"),
                             ("badjson", "AgentProtocolError", "not JSON"),
                             ("badrpc", "AgentProtocolError", "jsonrpc"),
                             ("flood", "AgentFlood", "")):
        ends_in_error(c, agent, "go", code, why, "%s: stopped, saying why" % agent, timeout=120)


def stop_reasons(c):
    for reason in ("refusal", "max_tokens", "max_turn_requests"):
        ends_in_error(c, "stop-" + reason, "go", "AgentStopped", reason,
                      "stop reason %s: error" % reason)


# ---------------------------------------------------------------- files ---

def fs_confined(srv, c):
    cid = hosted(c, "fs", "try")
    evs = settle(c, cid)
    check(agent_says(evs) == ["read-outside:refused write-outside:refused symlink:refused "
                              "inside:ok"], "only the workspace", agent_says(evs))
    ws = os.path.join(srv.data, "workspaces", cid.replace("-", ""))
    with open(os.path.join(ws, "inside.txt")) as f:
        check(f.read() == "hello", "the file it wrote is in its workspace")
    check(not os.path.exists(os.path.join(srv.data, "workspaces", "escape.txt")),
          "nothing was written outside")
    lint(c, cid)


def fs_burst(c):
    """Twelve reads sent at once: every one is answered (at most 4 run at a
    time; one past that is refused with an error answer, not queued), and
    the turn goes on."""
    cid = hosted(c, "fs-burst", "go")
    evs = settle(c, cid)
    says = agent_says(evs)
    n = dict(x.split(":") for x in says[0].split()) if len(says) == 1 else {}
    check(n and int(n["read"]) + int(n["refused"]) == 12 and int(n["read"]) >= 4,
          "every read answered, at least the first 4 with the file", says)
    lint(c, cid)


def demo_agent(srv, c):
    cid = hosted(c, "demo", "remember the milk")
    evs = settle(c, cid)
    says = agent_says(evs)
    check(len(says) == 1 and "remember the milk" in says[0], "the demo agent replies", says)
    ws = os.path.join(srv.data, "workspaces", cid.replace("-", ""))
    with open(os.path.join(ws, "notes.md")) as f:
        check("remember the milk" in f.read(), "and keeps notes in its workspace")
    lint(c, cid)


# ------------------------------------------------------------- lifetime ---

def agent_processes(data):
    """Processes whose working directory is under data (the hosted agents)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink("/proc/%s/cwd" % pid).startswith(data):
                found.append(int(pid))
        except OSError:
            pass
    return found


def sigterm_stops_agents():
    with serving("sigterm_server_stops_cleanly", args=agent_args()) as srv:
        c = srv.client()
        cid = hosted(c, "cancel", "wait")
        wait_for("the agent's call", lambda: of_kind(events(c, cid), "ActionEvent"))
        check(agent_processes(srv.data), "an agent runs")
        srv.stop()
        check(not agent_processes(srv.data), "SIGTERM stopped the agents with the server")


def restart_loads_session():
    with serving("restart_server_stops_cleanly", args=agent_args()) as srv:
        c = srv.client()
        cid = hosted(c, "crash-load", "first")
        evs = settle(c, cid)
        sid = c.expect("GET", conv_path(cid), 200).get("acp_session_id")
        check(sid, "the ACP session is kept with the conversation")
        srv.restart()
        c = srv.client()
        say(c, cid, "second")
        evs = settle(c, cid)
        check(agent_says(evs) == ["first", "second"], "the same session, loaded: history is "
              "not replayed into the log", summarize(evs))
        check(c.expect("GET", conv_path(cid), 200).get("acp_session_id") == sid,
              "the session was loaded, not made anew")
        lint(c, cid)


def default_agent():
    with serving("default_agent_server_stops_cleanly",
                 args=agent_args() + ["--default-agent", "echo"]) as srv:
        c = srv.client()
        info = c.expect("POST", "/api/conversations", 201,
                        {"initial_message": {"role": "user", "content": text("hi there")}})
        check(info["agent"] == {"kind": "ACPAgent", "acp_command": ["echo"]},
              "no agent: the default one", info)
        evs = settle(c, info["id"])
        check(agent_says(evs) == ["hi there"], "it answered", summarize(evs))
        lint(c, info["id"])
        info = c.expect("POST", "/api/conversations", 201,
                        {"agent": {"kind": "Agent", "llm": {"model": "m"}}})
        check(info["agent"]["kind"] == "Agent", "an agent that runs elsewhere stays so", info)


# ----------------------------------------------------------------- lint ---

def lint(c, cid, policy="reject", stuck=False):
    """The conversation's log passes `parley lint`: nothing in it would be
    refused, and no stuck finding. A log that records a finding (stuck)
    already holds the nudge and the StuckPatternDetected the conversation
    added: lint is run without its own detector, which would add them a
    second time, so that the log's own are checked as they are."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(events(c, cid), f)
    cmd = [os.environ["PARLEY"], "lint", "--json", "--policy", policy, f.name]
    if stuck:
        cmd[2:2] = ["--thresholds", "1000,1000,1000,1000"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(f.name)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    s = lines[-1].get("summary", {}) if lines else {}
    check(p.returncode in (0, 1) and s and s["rejected"] == 0 and s["refused"] == 0 and
          s["stuck"] == 0 and s["nudges"] == 0, "lint of %s: clean" % cid, s, p.stderr[-500:],
          [x for x in lines if x.get("verdict") not in (None, "ok", "added", "observed")][:3])

def ends_in_error(c, agent, say, code, why, what, timeout=60):
    """Host `agent`, say `say`, and check the run ends in status error with
    exactly one ConversationErrorEvent `code` whose detail holds every `why`."""
    cid = hosted(c, agent, say)
    evs = settle(c, cid, ("error",), timeout=timeout)
    errs = of_kind(evs, "ConversationErrorEvent", code=code)
    whys = (why,) if isinstance(why, str) else why
    check(len(errs) == 1 and all(w in errs[0]["detail"] for w in whys), what,
          summarize(evs)[-8:])
    lint(c, cid)
    return evs


def main():
    t0 = time.monotonic()
    with serving("main_server_stops_cleanly", args=agent_args()) as srv:
        c = srv.client()
        for fn in (full_turn, parallel_calls, permission_never_confirm, permission_confirmed,
                   permission_rejected, pause_cancels, crash_gives_up, missing_command,
                   not_registered, interleaved_message, interleaved_observed, unknown_result,
                   stuck_agent, stop_reasons, protocol_breakers):
            run(fn.__name__, fn, c)
        run("crash_restarts", crash_restarts, c, "crash")
        run("crash_restarts_loading_the_session", crash_restarts, c, "crash-load")
        run("fs_confined", fs_confined, srv, c)
        run("fs_burst", fs_burst, c)
        run("demo_agent", demo_agent, srv, c)
    run("sigterm_stops_agents", sigterm_stops_agents)
    run("restart_loads_session", restart_loads_session)
    run("default_agent", default_agent)
    return summary(t0)


if __name__ == "__main__":
    sys.exit(main())
