#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_lint.sh - `parley lint`, the offline checker: every vector of
# shared/vectors/compliance and /stuck gives the verdicts its "expect" or
# "checks" say; the same events as a JSON array, as NDJSON, on stdin and as
# an OpenHands conversation directory give the same findings; events
# without ids, the observe policy and custom thresholds; exit status 0 on a
# clean conversation, 1 on a violating one, and 2 with a one-line reason on
# bad usage and unreadable input. The --json findings are read with
# python3's standard library.
. "$(dirname "$0")/lib.sh"

VEC=${PARLEY_SHARED_DIR:?PARLEY_SHARED_DIR must point at the shared folder}/vectors
if [ ! -d "$VEC/compliance" ] || [ ! -d "$VEC/stuck" ]; then
    fail "no vectors in $VEC (compliance/, stuck/)"
fi
command -v python3 >/dev/null || fail "python3 is needed to read the --json findings"

# check.py VECTOR FINDINGS RC: the findings (lint --json) agree with the
# vector's expectations, and the exit status with the findings.
cat >"$TEST_TMP/check.py" <<'EOF'
import json, sys

vec = json.load(open(sys.argv[1]))
rows = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
rc = int(sys.argv[3])
errors = []

def want(cond, what):
    if not cond:
        errors.append(what)

want(rows and "summary" in rows[-1], "the last line is not the summary")
summary = rows[-1].get("summary", {}) if rows else {}
found = rows[:-1]
want(all("position" in f for f in found), "a finding without a position")

# The vectors name an id's second appearance "<id>#2".
events = ([s["append"] for s in vec["steps"] if "append" in s] if "steps" in vec
          else vec["events"])
name, seen = {}, {}
for pos, e in enumerate(events, 1):
    i = e.get("id")
    seen[i] = seen.get(i, 0) + 1
    name[pos] = i if seen[i] == 1 else "%s#%d" % (i, seen[i])
# the conversation's own events ("own": true) are in the log too
verdicts = [f for f in found if "verdict" in f and not f.get("own")]
want(all(f["id"] == events[f["position"] - 1].get("id") for f in verdicts),
     "a finding names another id than its position's event")
log = [name[f["position"]] for f in verdicts if f["verdict"] in ("ok", "committed", "observed")]
indexes = [f["index"] for f in found if "index" in f]
want(indexes == list(range(len(indexes))),
     "log indexes are not 0, 1, 2... in the order of commits")
want(len(indexes) == len(log) + len([f for f in found if f.get("own") and "index" in f]),
     "an input event committed without an index")
bad = summary.get("violations", -1)
want(rc == (1 if bad else 0), "exit status %d with %d violations" % (rc, bad))

if "steps" in vec:
    exp = vec["expect"]
    rejected = {name[f["position"]]: f["rule"] for f in verdicts if f["verdict"] == "rejected"}
    deferred = []
    for f in verdicts:
        if f["verdict"] == "deferred" and name[f["position"]] not in deferred:
            deferred.append(name[f["position"]])
    want(log == exp["log"], "log %s, expected %s" % (log, exp["log"]))
    want(rejected == exp.get("rejected", {}),
         "rejected %s, expected %s" % (rejected, exp.get("rejected", {})))
    want(deferred == exp.get("deferred", []),
         "deferred %s, expected %s" % (deferred, exp.get("deferred", [])))
    want(rc == (1 if exp.get("rejected") else 0), "exit status %d" % rc)
else:
    want(log == [name[p] for p in range(1, len(events) + 1)], "not every event committed")
    prev = 0
    for c in vec["checks"]:
        n = c["after"]
        # as a live conversation shows it: a finding since the last check
        state = None
        for f in found:
            if f.get("stuck") and prev < f["position"] <= n:
                state = f["stuck"]
        nudge = any("nudge" in f and prev < f["position"] <= n for f in found)
        prev = n
        want((state is not None) == c["stuck"], "after %d: stuck is %s" % (n, state))
        if c.get("rule"):
            want(state == c["rule"], "after %d: rule %s, expected %s" % (n, state, c["rule"]))
        want(nudge == c.get("nudge", False), "after %d: nudge %s" % (n, nudge))
    if any(c["stuck"] for c in vec["checks"]):
        want(rc == 1, "stuck, but exit status %d" % rc)

if errors:
    sys.exit("%s: %s" % (sys.argv[1], "; ".join(errors)))
EOF

# as_events VECTOR FORMAT OUT: the vector's events as FORMAT (array,
# ndjson, noid = NDJSON without ids or timestamps, dir = OpenHands layout
# with indexes from $4 on).
cat >"$TEST_TMP/convert.py" <<'EOF'
import json, os, sys

vec = json.load(open(sys.argv[1]))
fmt, out = sys.argv[2], sys.argv[3]
events = ([s["append"] for s in vec["steps"] if "append" in s] if "steps" in vec
          else vec["events"])
if fmt == "array":
    json.dump(events, open(out, "w"), indent=2)
elif fmt in ("ndjson", "noid"):
    with open(out, "w", newline="") as f:
        f.write("\n")
        for e in events:
            if fmt == "noid":
                e = {k: v for k, v in e.items() if k not in ("id", "timestamp")}
            f.write(json.dumps(e) + ("\r\n" if len(e) % 2 else "\n\n"))
else:
    os.makedirs(out)
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    for i, e in enumerate(events, first):
        with open(os.path.join(out, "event-%05d-%s.json" % (i, e["id"])), "w") as f:
            json.dump(e, f)
EOF

lint_json() { # lint_json OUT ARGS...: the --json findings in OUT, the status in $rc
    local out=$1
    shift
    rc=0
    "$PARLEY" lint --json "$@" >"$out" 2>"$TEST_TMP/err" || rc=$?
    [ "$rc" -le 1 ] || fail "lint $* exited $rc: $(cat "$TEST_TMP/err")"
}

# ---------------------------------------------------- every vector ---
n=0
for v in "$VEC"/compliance/*.json "$VEC"/stuck/*.json; do
    base=$(basename "$v" .json)
    lint_json "$TEST_TMP/$base.out" "$v"
    python3 "$TEST_TMP/check.py" "$v" "$TEST_TMP/$base.out" "$rc" || fail "lint $v disagrees"
    json_rc=$rc

    # human output: the same findings, one line each, and a summary line
    expect_status "$json_rc" "$PARLEY" lint "$v"
    [ "$(wc -l <"$TEST_TMP/out")" -eq "$(wc -l <"$TEST_TMP/$base.out")" ] ||
        fail "$base: human and --json outputs have different numbers of lines"
    tail -n 1 "$TEST_TMP/out" | grep -qE '^summary: [0-9]+ events?: ' || fail "$base: no summary"
    grep -q $'\033' "$TEST_TMP/out" && fail "$base: colour codes when stdout is not a terminal"
    grep -vE '^(#[0-9]+ |summary: )' "$TEST_TMP/out" && fail "$base: a line that is not a finding"

    # the same events as an array, NDJSON, stdin and an OpenHands folder
    python3 "$TEST_TMP/convert.py" "$v" array "$TEST_TMP/$base.array.json"
    python3 "$TEST_TMP/convert.py" "$v" ndjson "$TEST_TMP/$base.ndjson"
    python3 "$TEST_TMP/convert.py" "$v" dir "$TEST_TMP/$base.conv/events"
    : >"$TEST_TMP/$base.conv/events/.eventlog.lock"
    echo '{}' >"$TEST_TMP/$base.conv/base_state.json"
    echo '{}' >"$TEST_TMP/$base.conv/events/event-notes.json"
    for form in "$base.array.json" "$base.ndjson" "$base.conv"; do
        lint_json "$TEST_TMP/form.out" "$TEST_TMP/$form"
        [ "$rc" -eq "$json_rc" ] || fail "$form: exit status $rc, the vector gave $json_rc"
        cmp -s "$TEST_TMP/form.out" "$TEST_TMP/$base.out" ||
            fail "$form: findings differ from the vector's: $(diff "$TEST_TMP/form.out" "$TEST_TMP/$base.out")"
    done
    lint_json "$TEST_TMP/form.out" - <"$TEST_TMP/$base.ndjson"
    cmp -s "$TEST_TMP/form.out" "$TEST_TMP/$base.out" || fail "$base: stdin gives other findings"
    n=$((n + 1))
done
[ "$n" -ge 19 ] || fail "only $n vector files found in $VEC"

# ---------------------------------------------------- exit status ---
expect_status 0 "$PARLEY" lint "$VEC/compliance/valid_full_turn.json"
expect_grep '^summary: 7 events: 7 committed, 0 rejected; .*: clean$' "$TEST_TMP/out"
expect_status 1 "$PARLEY" lint "$VEC/compliance/a04_interleaved_assistant_message.json"
expect_grep '^#3 m1 MessageEvent \(agent\): rejected: interleaved_message: ' "$TEST_TMP/out"
expect_grep '1 violation$' "$TEST_TMP/out"
# the line the issue shows, then the deferral expiring at the end
expect_status 1 "$PARLEY" lint "$VEC/compliance/a01_unmatched_tool_use.json"
expect_grep '^#3 u2 MessageEvent \(user\): deferred: 1 tool call pending \(call_abc123\)$' \
    "$TEST_TMP/out"
expect_grep '^#3 u2 MessageEvent \(user\): rejected: interleaved_message: .*\(was deferred\)$' \
    "$TEST_TMP/out"
expect_status 0 "$PARLEY" lint "$VEC/compliance/a03_interleaved_user_message.json"
expect_grep '^#3 u2 MessageEvent \(user\): committed \(was deferred\)$' "$TEST_TMP/out"
# --pretty: each event as the terminal visualizer shows it, then its findings
expect_status 0 "$PARLEY" lint --pretty "$VEC/compliance/valid_full_turn.json"
expect_grep '^── Agent Action ─+$' "$TEST_TMP/out"
expect_grep '^Action: TerminalAction$' "$TEST_TMP/out"
expect_grep '^── Observation ─+$' "$TEST_TMP/out"
expect_grep '^#3 a1 ActionEvent \(agent\): ok$' "$TEST_TMP/out"
expect_grep '^summary: 7 events' "$TEST_TMP/out"
expect_status 2 "$PARLEY" lint --pretty --json "$VEC/compliance/valid_full_turn.json"
expect_grep 'do not go together' "$TEST_TMP/err"
expect_status 0 "$PARLEY" lint "$VEC/compliance/reorder_by_parent.json"
expect_grep '^#2 t1 ObservationEvent \(environment\): held: ' "$TEST_TMP/out"
expect_grep '^#2 t1 ObservationEvent \(environment\): committed \(was held\)$' "$TEST_TMP/out"

# observe: the agent's message is committed and the violation still counts
lint_json "$TEST_TMP/obs.out" --policy observe "$VEC/compliance/a04_interleaved_assistant_message.json"
[ "$rc" -eq 1 ] || fail "observe policy: exit status $rc, wanted 1"
expect_grep '"id":"m1".*"verdict":"observed","rule":"interleaved_message"' "$TEST_TMP/obs.out"
expect_grep '"committed":4,' "$TEST_TMP/obs.out"

# thresholds: a fifth repeat is needed at 5, so four are not stuck
expect_status 0 "$PARLEY" lint --thresholds 5,,, "$VEC/stuck/repeating_action_observation.json"
expect_status 1 "$PARLEY" lint --thresholds 4,3,3,6 "$VEC/stuck/repeating_action_observation.json"
expect_grep '^#9 t17 ObservationEvent \(environment\): stuck: repeating_action_observation: ' \
    "$TEST_TMP/out"

# the bounds on waiting events, as serve's: a second deferral past --defer-max 1
python3 - "$VEC/compliance/a03_interleaved_user_message.json" >"$TEST_TMP/two.ndjson" <<'EOF'
import json, sys
events = [s["append"] for s in json.load(open(sys.argv[1]))["steps"] if "append" in s]
events.insert(3, dict(events[2], id="u3"))  # another user message while c1 is pending
print("\n".join(json.dumps(e) for e in events))
EOF
expect_status 0 "$PARLEY" lint "$TEST_TMP/two.ndjson"
expect_status 1 "$PARLEY" lint --defer-max 1 "$TEST_TMP/two.ndjson"
expect_grep '^#4 u3 MessageEvent \(user\): refused: too many deferred messages in this conversation' "$TEST_TMP/out"
expect_grep '^#3 u2 MessageEvent \(user\): committed \(was deferred\)$' "$TEST_TMP/out"

# upstream records a result whose parent is the user message that came
# while its call ran: live defers the message and puts the result where the
# message was deferred; a retry of the deferred message is not deferred twice
python3 - "$VEC/compliance/a03_interleaved_user_message.json" >"$TEST_TMP/upstream.ndjson" <<'EOF'
import json, sys
events = [s["append"] for s in json.load(open(sys.argv[1]))["steps"] if "append" in s]
kinds = [e["kind"] for e in events]
act = kinds.index("ActionEvent")
msg = next(i for i, e in enumerate(events) if i > act and e["kind"] == "MessageEvent")
obs = kinds.index("ObservationEvent")
events[msg]["parent_id"] = events[act]["id"]
events[obs]["parent_id"] = events[msg]["id"]
retry = dict(events[msg]); retry.pop("parent_id")
events.insert(msg + 1, retry)
print("\n".join(json.dumps(e) for e in events))
EOF
expect_status 0 "$PARLEY" lint "$TEST_TMP/upstream.ndjson"
expect_grep '^#3 u2 MessageEvent \(user\): deferred: ' "$TEST_TMP/out"
expect_grep '^#4 u2 MessageEvent \(user\): retry: the same message as #3, which is deferred' \
    "$TEST_TMP/out"
expect_grep '^#5 t1 ObservationEvent \(environment\): ok$' "$TEST_TMP/out"
expect_grep '^#3 u2 MessageEvent \(user\): committed \(was deferred\)$' "$TEST_TMP/out"

# execution_status moves as live moves it (finished only from running), and
# only among its values
cat >"$TEST_TMP/status.ndjson" <<'EOF'
{"id":"s1","source":"environment","key":"execution_status","value":"running","kind":"ConversationStateUpdateEvent"}
{"id":"s2","source":"environment","key":"execution_status","value":"paused","kind":"ConversationStateUpdateEvent"}
{"id":"s3","source":"environment","key":"execution_status","value":"finished","kind":"ConversationStateUpdateEvent"}
{"id":"s4","source":"environment","key":"execution_status","value":"sleeping","kind":"ConversationStateUpdateEvent"}
EOF
expect_status 1 "$PARLEY" lint "$TEST_TMP/status.ndjson"
expect_grep '^#3 s3 ConversationStateUpdateEvent \(environment\): rejected: execution_status cannot go from paused to finished' "$TEST_TMP/out"
expect_grep "^#4 s4 ConversationStateUpdateEvent \(environment\): rejected: invalid_event: .*'value' must be one of idle, running" "$TEST_TMP/out"

# events without ids and timestamps are stamped, and named by position
python3 "$TEST_TMP/convert.py" "$VEC/compliance/a03_interleaved_user_message.json" noid \
    "$TEST_TMP/noid.ndjson"
expect_status 0 "$PARLEY" lint "$TEST_TMP/noid.ndjson"
expect_grep '^#2 ActionEvent \(agent\): ok$' "$TEST_TMP/out"
expect_grep '^#3 MessageEvent \(user\): committed \(was deferred\)$' "$TEST_TMP/out"

# an invalid event is a finding, not an input error; so is an idempotent retry (but clean)
printf '%s\n' '[{"kind": "PauseEvent", "id": "p1"}, {"kind": "Frobnicate"}, 7,' \
    '{"kind": "PauseEvent", "id": "p1"}, {"kind": "PauseEvent", "id": "p1", "source": "agent"}]' \
    >"$TEST_TMP/mixed.json"
lint_json "$TEST_TMP/mixed.out" "$TEST_TMP/mixed.json"
[ "$rc" -eq 1 ] || fail "invalid events: exit status $rc, wanted 1"
expect_grep '"position":2,.*"verdict":"rejected","rule":"invalid_event","detail":"unknown event kind' \
    "$TEST_TMP/mixed.out"
expect_grep '"position":3,.*"rule":"invalid_event","detail":"event: must be a JSON object"' \
    "$TEST_TMP/mixed.out"
expect_grep '"position":4,"id":"p1",.*"verdict":"retry"' "$TEST_TMP/mixed.out"
expect_grep '"position":5,"id":"p1",.*"rule":"duplicate_event_id"' "$TEST_TMP/mixed.out"

# OpenHands folders: numeric order past five digits, and a flat folder of event files
python3 "$TEST_TMP/convert.py" "$VEC/stuck/no_user_message_in_window.json" dir \
    "$TEST_TMP/wide/events" 99990
lint_json "$TEST_TMP/wide.out" "$TEST_TMP/wide"
lint_json "$TEST_TMP/vec.out" "$VEC/stuck/no_user_message_in_window.json"
cmp -s "$TEST_TMP/wide.out" "$TEST_TMP/vec.out" || fail "event-100000-* sorted before event-99999-*"
lint_json "$TEST_TMP/flat.out" "$TEST_TMP/wide/events"
cmp -s "$TEST_TMP/flat.out" "$TEST_TMP/vec.out" || fail "a folder of event files reads otherwise"
mkdir "$TEST_TMP/empty-conv" "$TEST_TMP/empty-conv/events"
expect_status 0 "$PARLEY" lint "$TEST_TMP/empty-conv"
expect_grep '^summary: 0 events' "$TEST_TMP/out"

# ------------------------------------------ unreadable input: exit 2 ---
# bad_input REASON-PATTERN ARGS...: exit 2, one line on stderr matching
bad_input() {
    local pattern=$1
    shift
    expect_status 2 "$PARLEY" lint "$@"
    [ "$(wc -l <"$TEST_TMP/err")" -eq 1 ] || fail "lint $*: not one line: $(cat "$TEST_TMP/err")"
    expect_grep "^parley lint: .*$pattern" "$TEST_TMP/err"
}
bad_input "cannot open $TEST_TMP/missing.json: No such file or directory" "$TEST_TMP/missing.json"
: >"$TEST_TMP/empty.json"
bad_input 'is empty: no events' "$TEST_TMP/empty.json"
{
    head -n 2 "$TEST_TMP/valid_full_turn.ndjson"
    echo '{"id": "x", "kind": oops}'
} >"$TEST_TMP/bad.ndjson"
bad_input 'bad.ndjson: line 3, column [0-9]+: not valid JSON: invalid token' "$TEST_TMP/bad.ndjson"
head -c 700 "$TEST_TMP/valid_full_turn.array.json" >"$TEST_TMP/cut.json"
bad_input 'cut.json: line [0-9]+, column [0-9]+: the JSON value that starts at line [0-9]+, column 3 is cut short' \
    "$TEST_TMP/cut.json"
echo '[{"kind": "PauseEvent"}] trailing' >"$TEST_TMP/trail.json"
bad_input 'line 1, column 26: unexpected text after the array' "$TEST_TMP/trail.json"
echo '[{"kind": "PauseEvent"} {"kind": "PauseEvent"}]' >"$TEST_TMP/nocomma.json"
bad_input "',' or ']' expected" "$TEST_TMP/nocomma.json"
echo '{"steps": [{"append": {"kind": "PauseEvent"}}, {"rewind": 2}]}' >"$TEST_TMP/step.json"
bad_input 'step 2 is neither' "$TEST_TMP/step.json"
mkdir "$TEST_TMP/notconv"
bad_input 'no events/ folder and no event-\*.json files' "$TEST_TMP/notconv"
cp -r "$TEST_TMP/valid_full_turn.conv" "$TEST_TMP/brokenconv"
echo '{"id": "s9", "kind": ' >"$TEST_TMP/brokenconv/events/event-00007-s9.json"
bad_input 'brokenconv/events/event-00007-s9.json: line 2, column 1: .* cut short' \
    "$TEST_TMP/brokenconv"
echo '{"kind": "PauseEvent"} {"kind": "PauseEvent"}' >"$TEST_TMP/brokenconv/events/event-00007-s9.json"
bad_input 'event-00007-s9.json: line 1, column 24: more than one JSON value' "$TEST_TMP/brokenconv"
truncate -s 1100M "$TEST_TMP/huge.json" # sparse: nothing is written
bad_input 'huge.json is 1.1 GiB, larger than 1 GiB' "$TEST_TMP/huge.json"
rm -f "$TEST_TMP/huge.json"
bad_input 'is empty: no events' - </dev/null

# ------------------------------------------------ usage: exit 2 ---
expect_status 0 "$PARLEY" lint --help
expect_grep '^usage: parley lint ' "$TEST_TMP/out"
expect_status 0 "$PARLEY" --help
expect_grep '^  lint ' "$TEST_TMP/out"
bad_input 'which conversation\?' # no argument
bad_input "unexpected argument 'b'" a b
bad_input "unknown policy 'lenient'" --policy lenient "$VEC/compliance/a01_unmatched_tool_use.json"
bad_input "option '--policy' wants a value" --policy
bad_input "--thresholds wants four whole numbers" --thresholds 4,3 x
bad_input "--thresholds wants four whole numbers" --thresholds 4,3,0,6 x
bad_input "unknown option '--pretty-please'" --pretty-please x
bad_input "--hold-max wants a whole number from 1 to 10000" --hold-max 0 x

# ------------------------------------------------ colour on a terminal ---
if command -v script >/dev/null; then
    script -qc "'$PARLEY' lint '$VEC/compliance/a04_interleaved_assistant_message.json'" \
        /dev/null >"$TEST_TMP/tty.out" </dev/null || true
    grep -q $'\033\\[' "$TEST_TMP/tty.out" || fail "no colour on a terminal"
    NO_COLOR=1 script -qc "'$PARLEY' lint '$VEC/compliance/a04_interleaved_assistant_message.json'" \
        /dev/null >"$TEST_TMP/tty.out" </dev/null || true
    grep -q $'\033\\[' "$TEST_TMP/tty.out" && fail "colour on a terminal despite NO_COLOR"
    grep -q 'rejected: interleaved_message' "$TEST_TMP/tty.out" || fail "no findings on a terminal"
fi
echo "ok"
