#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_demo_agent.sh - `parley demo-agent`, the scripted ACP agent, driven by
# tests/node/acp_client.mjs, a client built on the official ACP SDK that
# checks every message the agent writes against the protocol's schema: a
# turn that appends to notes.md through the client's fs methods, two turns
# and a session/load in a restarted agent (the history replayed, then a
# third turn), a cancel while the agent waits for the client and one
# between paced updates, execute calls without fs, a refused write, the
# reply in N chunks; then raw lines (parse error, unknown method, bad
# params, unknown session, the 16 MiB bound), SIGTERM, and the usage. Each
# client run also checks that the agent exits 0 once its stdin ends (under
# ASan, a leak makes that exit status fail). Results are read with python3's
# standard library.
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
client="$here/../node/acp_client.mjs"
[ -d "$here/../node/node_modules/@agentclientprotocol/sdk" ] ||
    fail "the ACP SDK is missing from tests/node/node_modules: run tools/bootstrap.sh"
command -v node >/dev/null || fail "node is needed for the ACP test client"
command -v python3 >/dev/null || fail "python3 is needed to read the results"

# acp OUT CLIENT-ARGS... -- AGENT-ARGS...: the client against the demo agent;
# fail unless it found no error.
acp() {
    local out=$1
    shift
    local args=()
    while [ "$1" != "--" ]; do
        args+=("$1")
        shift
    done
    shift
    node "$client" --timeout-ms 120000 "${args[@]}" -- "$PARLEY" demo-agent "$@" >"$out" \
        2>"$TEST_TMP/acp.err" ||
        fail "acp_client ${args[*]} -- demo-agent $*: $(tail -n 5 "$TEST_TMP/acp.err")"
}

# check OUT EXPR...: each Python expression holds, of `s` (the client's
# summary), `msgs` (the agents' messages) and `updates(kind)` (the
# session/updates of that kind, in order).
check() {
    local out=$1
    shift
    python3 - "$out" "$@" <<'EOF' || fail "$out: see above"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = lines[-1]["summary"]
msgs = [l["message"] for l in lines[:-1]]
def updates(kind):
    return [m["params"]["update"] for m in msgs if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == kind]
for expr in sys.argv[2:]:
    if not eval(expr):
        sys.exit("not so: %s\nsummary: %s" % (expr, json.dumps(s)[:4000]))
EOF
}

full='{"agent_thought_chunk": 1, "tool_call": 1, "tool_call_update": 1, "agent_message_chunk": 3}'

# ----------------------------------------------- a turn that writes notes ---
mkdir "$TEST_TMP/one"
acp "$TEST_TMP/one.out" --cwd "$TEST_TMP/one" --prompt "hello parley" --
check "$TEST_TMP/one.out" 's["ok"]' \
    's["agent"]["agentInfo"]["name"] == "parley-demo-agent"' \
    's["agent"]["agentCapabilities"]["loadSession"] is True' \
    's["sessionId"].startswith("demo-")' \
    "s['turns'][0]['kinds'] == $full" \
    's["turns"][0]["stopReason"] == "end_turn"' \
    's["turns"][0]["text"] == "You said: hello parley \u2014 noted in notes.md. Anything else?"' \
    's["turns"][0]["toolCalls"] == {"call-1": "completed"}' \
    's["turns"][0]["updatesAfterAnswer"] == 0' \
    '[c["method"] for c in s["fsCalls"]] == ["fs/read_text_file", "fs/write_text_file"]' \
    'all(c["path"] == s["cwd"] + "/notes.md" for c in s["fsCalls"])' \
    'updates("tool_call")[0]["kind"] == "edit" and updates("tool_call")[0]["status"] == "pending"' \
    'updates("tool_call")[0]["rawInput"] == {"path": s["cwd"] + "/notes.md"}' \
    'updates("tool_call_update")[0]["content"] == [{"type": "diff", "path": s["cwd"] + "/notes.md", "oldText": None, "newText": "hello parley\n"}]'
[ "$(cat "$TEST_TMP/one/notes.md")" = "hello parley" ] || fail "notes.md: $(cat "$TEST_TMP/one/notes.md")"
ls "$TEST_TMP/one/.demo-agent/"demo-*.ndjson >/dev/null || fail "no history in .demo-agent/"

# ----------------------- two turns, a restart, the history loaded, a third ---
mkdir "$TEST_TMP/two"
printf 'old notes\n' >"$TEST_TMP/two/notes.md"
acp "$TEST_TMP/two.out" --cwd "$TEST_TMP/two" --prompt "first" --prompt "second" \
    --load --prompt "third" --
check "$TEST_TMP/two.out" 's["ok"]' \
    '[t["stopReason"] for t in s["turns"]] == ["end_turn"] * 3' \
    "all(t['kinds'] == $full for t in s['turns'])" \
    '[t["toolCalls"] for t in s["turns"]] == [{"call-1": "completed"}, {"call-2": "completed"}, {"call-3": "completed"}]' \
    's["load"]["answered"] and s["load"]["matchesLive"]' \
    's["load"]["updates"] == 14 and s["load"]["kinds"]["user_message_chunk"] == 2' \
    'updates("tool_call_update")[0]["content"][0]["oldText"] == "old notes\n"' \
    'updates("tool_call_update")[-1]["content"][0]["newText"] == "old notes\nfirst\nsecond\nthird\n"'
[ "$(cat "$TEST_TMP/two/notes.md")" = $'old notes\nfirst\nsecond\nthird' ] ||
    fail "notes.md after three turns: $(cat "$TEST_TMP/two/notes.md")"

# a history is found in the cwd it was kept in, not in another
sid=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["summary"]["sessionId"])' "$TEST_TMP/two.out")
mkdir "$TEST_TMP/other"
printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/load\",\"params\":{\"sessionId\":\"$sid\",\"cwd\":\"$TEST_TMP/other\",\"mcpServers\":[]}}" |
    "$PARLEY" demo-agent >"$TEST_TMP/load.out" 2>"$TEST_TMP/load.err" || fail "load elsewhere: $(cat "$TEST_TMP/load.err")"
expect_grep '^\{"jsonrpc":"2.0","id":1,"error":\{"code":-32002,' "$TEST_TMP/load.out"

# ---------------------------------------------------------------- cancel ---
# while the agent waits for the client's answers, a request is held until
# the turn ends, a cancel of another session and a response to no request
# change nothing, and the answers are matched by id
python3 - "$PARLEY" "$TEST_TMP/two" "$sid" <<'EOF' || fail "answers while waiting: see above"
import json, signal, subprocess, sys
signal.alarm(120)  # a hung agent fails the test, it does not hang it
parley, cwd, sid = sys.argv[1:]
agent = subprocess.Popen([parley, "demo-agent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
seen = []
def send(m):
    agent.stdin.write((json.dumps(m) + "\n").encode())
    agent.stdin.flush()
def until(pred):  # the agent's messages up to the first that pred holds of
    for line in agent.stdout:
        m = json.loads(line)
        seen.append(m)
        if pred(m):
            return m
    sys.exit("the agent ended first; it sent %s" % seen)
def asks(m):
    return "method" in m and "id" in m
caps = {"fs": {"readTextFile": True, "writeTextFile": True}}
send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
      "params": {"protocolVersion": 1, "clientCapabilities": caps}})
send({"jsonrpc": "2.0", "id": 2, "method": "session/load",
      "params": {"sessionId": sid, "cwd": cwd, "mcpServers": []}})
send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
      "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "fourth"}]}})
read = until(asks)
send({"jsonrpc": "2.0", "id": 4, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "demo-other"}})
send({"jsonrpc": "2.0", "id": 99, "result": {"content": "an answer to no request"}})
send({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "as read\n"}})
write = until(asks)
send({"jsonrpc": "2.0", "id": write["id"], "result": None})
until(lambda m: m.get("id") == 4 and not asks(m))
agent.stdin.close()
rc = agent.wait(timeout=60)
answers = [m for m in seen if "method" not in m]
ends = [m["params"]["update"] for m in seen if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] == "tool_call_update"]
checks = {
    "exit 0 at the end of input": rc == 0,
    "answers in order, the held request last": [m["id"] for m in answers] == [1, 2, 3, 4],
    "end_turn": answers[2]["result"] == {"stopReason": "end_turn"},
    "the agent's requests": [read["method"], write["method"]] == ["fs/read_text_file", "fs/write_text_file"],
    "what was written": write["params"]["content"] == "as read\nfourth\n",
    "the diff": ends[-1]["toolCallId"] == "call-4" and ends[-1]["status"] == "completed"
                and ends[-1]["content"][0]["oldText"] == "as read\n",
}
bad = [k for k, ok in checks.items() if not ok]
if bad:
    sys.exit("not so: %s\n%s" % (bad, "\n".join(json.dumps(m)[:300] for m in seen)))
EOF

# ------------------------------------------------------------------ SIGTERM ---
coproc AGENT { exec "$PARLEY" demo-agent 2>"$TEST_TMP/term.err"; }
pid=$AGENT_PID
echo '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}' >&"${AGENT[1]}"
read -r -t 60 -u "${AGENT[0]}" line || fail "no answer to initialize within 60 s"
[[ "$line" == *'"protocolVersion":1'* ]] || fail "initialize: $line"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 143 ] || fail "demo-agent exited $rc after SIGTERM, wanted 143 (killed by it)"

# -------------------------------------------------------------------- usage ---
expect_status 0 "$PARLEY" demo-agent --help
expect_grep '^usage: parley demo-agent ' "$TEST_TMP/out"
expect_grep '--tool-calls N' "$TEST_TMP/out"
expect_status 0 "$PARLEY" --help
expect_grep '^  demo-agent +a scripted ACP agent on stdio' "$TEST_TMP/out"
bad_usage() { # bad_usage PATTERN ARGS...: exit 2 and one line on stderr that matches
    local pattern=$1
    shift
    expect_status 2 "$PARLEY" demo-agent "$@" </dev/null
    [ "$(wc -l <"$TEST_TMP/err")" -eq 1 ] || fail "demo-agent $*: not one line: $(cat "$TEST_TMP/err")"
    expect_grep "^parley demo-agent: $pattern.*\(see: parley demo-agent --help\)$" "$TEST_TMP/err"
    [ ! -s "$TEST_TMP/out" ] || fail "demo-agent $*: wrote on stdout"
}
bad_usage "--tool-calls wants a whole number from 0 to 1000, not '1001'" --tool-calls 1001
bad_usage "--chunks wants a whole number from 0 to 1000, not 'many'" --chunks many
bad_usage "--delay-ms wants a whole number from 0 to 60000, not '-1'" --delay-ms -1
bad_usage "option '--delay-ms' wants a value" --delay-ms
bad_usage "unknown option '--fast'" --fast
bad_usage "unexpected argument 'now'" now
echo "ok"
