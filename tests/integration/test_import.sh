#!/usr/bin/env bash
# test_import.sh - `parley import` against a real `parley serve` (--url) and
# in-process on a data directory (--data): a Claude transcript built from a
# reducer vector is imported and read back with its ids and timestamps; a
# transcript that breaks a tool-call rule is refused rule by rule with its
# line and leaves nothing, and --policy observe imports it; bad inputs give
# one-line errors; `parley blocks` on vector files equals their expected.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
VEC="${PARLEY_SHARED_DIR:-$here/../../../shared}/vectors/reducer"
[ -d "$VEC" ] || fail "the reducer vectors are missing: $VEC (set PARLEY_SHARED_DIR)"

# transcript VECTOR OUT: the vector's main Claude lines as a JSONL file
transcript() {
    /usr/bin/python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
with open(sys.argv[2], "w") as f:
    for line in v["input"]["main"]:
        f.write(json.dumps(line) + "\n")' "$VEC/$1.json" "$2"
}
good="$TEST_TMP/good.jsonl"
bad="$TEST_TMP/bad.jsonl"
transcript claude_parallel_tools "$good"
transcript claude_unknown_tool_result "$bad"

# ids and timestamps of the converted events, as "id timestamp" lines
expect_kept() { # FILE_WITH_SEARCH_ANSWER
    /usr/bin/python3 - "$good" "$1" <<'EOF' || fail "ids or timestamps not kept: $(head -c 1500 "$2")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
items = json.load(open(sys.argv[2]))["items"]
want = [(l["uuid"], l["timestamp"]) for l in lines]
got = [(e["id"], e["timestamp"]) for e in items]
assert got == want, (got, want)
kinds = [e["kind"] for e in items]
assert kinds == ["MessageEvent", "MessageEvent", "ActionEvent", "ActionEvent",
                 "ObservationEvent", "ObservationEvent", "MessageEvent"], kinds
assert items[2]["llm_response_id"] == items[3]["llm_response_id"] == "msg_pt_01"
EOF
}

# ---- usage and bad input ---------------------------------------------------
expect_status 0 "$PARLEY" import --help
expect_grep "usage: parley import" "$TEST_TMP/out"
expect_status 2 "$PARLEY" import "$good"
expect_grep "--url URL .* or --data DIR" "$TEST_TMP/err"
expect_status 2 "$PARLEY" import "$good" --data "$TEST_TMP/d" --policy lenient
expect_status 2 "$PARLEY" import - --data "$TEST_TMP/d"

{ head -2 "$good"; echo 'this is not JSON'; tail -1 "$good"; } >"$TEST_TMP/notjson.jsonl"
expect_status 2 "$PARLEY" import "$TEST_TMP/notjson.jsonl" --data "$TEST_TMP/d"
expect_grep "notjson.jsonl: line 3, column 1: not valid JSON" "$TEST_TMP/err"
{ head -2 "$good"; echo '{"type":"mystery","uuid":"m1"}'; } >"$TEST_TMP/unknown.jsonl"
expect_status 2 "$PARLEY" import "$TEST_TMP/unknown.jsonl" --data "$TEST_TMP/d"
expect_grep "unknown.jsonl: line 3: unknown record type 'mystery'" "$TEST_TMP/err"
[ "$(wc -l <"$TEST_TMP/err")" -eq 1 ] || fail "more than one line for a bad record: $(cat "$TEST_TMP/err")"
truncate -s 1073741825 "$TEST_TMP/huge.jsonl"
expect_status 2 "$PARLEY" import "$TEST_TMP/huge.jsonl" --data "$TEST_TMP/d"
expect_grep "larger than 1 GiB" "$TEST_TMP/err"
rm -f "$TEST_TMP/huge.jsonl"
expect_status 2 "$PARLEY" lint "$TEST_TMP/unknown.jsonl"
expect_grep "line 3: unknown record type 'mystery'" "$TEST_TMP/err"

# lint reads the transcript too, naming source lines
expect_status 0 "$PARLEY" lint "$good"
expect_grep "^#3 \\(line 3\\) .* ActionEvent \\(agent\\): ok" "$TEST_TMP/out"
expect_status 1 "$PARLEY" lint "$bad"
expect_grep "^#2 \\(line 2\\) .*rejected: unmatched_tool_result" "$TEST_TMP/out"

# ---- in process: --data ----------------------------------------------------
data="$TEST_TMP/data"
expect_status 0 "$PARLEY" import "$good" --data "$data"
cid_data=$(cat "$TEST_TMP/out")
[[ "$cid_data" =~ ^[0-9a-f-]{36}$ ]] || fail "not a conversation id: $cid_data"
expect_status 1 "$PARLEY" import "$bad" --data "$data"
expect_grep "bad.jsonl: line 2: rejected unmatched_tool_result" "$TEST_TMP/err"
expect_grep "bad.jsonl: line 5: rejected duplicate_tool_result" "$TEST_TMP/err"
expect_grep "nothing imported" "$TEST_TMP/err"
[ ! -s "$TEST_TMP/out" ] || fail "a refused import printed an id: $(cat "$TEST_TMP/out")"
expect_status 0 "$PARLEY" import "$bad" --data "$data" --policy observe
expect_grep "imported with 2 violations recorded" "$TEST_TMP/err"

# ---- over HTTP: --url ------------------------------------------------------
coproc SRV { exec "$PARLEY" serve --data "$data" --log-level warn --listen 127.0.0.1:0; }
read -r -t 60 -u "${SRV[0]}" line || fail "serve printed nothing within 60 s"
url=${line#listening on }
get() { curl -sS --fail "$url$1" >"$TEST_TMP/get" || fail "GET $1 failed"; }

# what --data imported is there, as it was
get "/api/conversations/$cid_data/events/search?limit=100"
expect_kept "$TEST_TMP/get"
get "/api/conversations/count"
before=$(cat "$TEST_TMP/get")
[ "$before" = 2 ] || fail "two conversations expected (good, observed bad), not $before"

expect_status 0 "$PARLEY" import "$good" --url "$url" --title "parallel tools"
cid=$(cat "$TEST_TMP/out")
get "/api/conversations/$cid/events/search?limit=100"
expect_kept "$TEST_TMP/get"
get "/api/conversations/$cid"
expect_grep '"title":"parallel tools"' "$TEST_TMP/get"
expect_grep '"importedfrom":"claude"' "$TEST_TMP/get"

# a violating transcript: refused with its rules and lines, nothing left
expect_status 1 "$PARLEY" import "$bad" --url "$url"
expect_grep "bad.jsonl: line 2: rejected unmatched_tool_result" "$TEST_TMP/err"
get "/api/conversations/count"
[ "$(cat "$TEST_TMP/get")" = 3 ] || fail "a refused import left a conversation: $(cat "$TEST_TMP/get")"

# observe: imported, each violation recorded in the log
expect_status 0 "$PARLEY" import "$bad" --url "$url" --policy observe
cid_obs=$(cat "$TEST_TMP/out")
get "/api/conversations/$cid_obs/events/search?limit=100"
/usr/bin/python3 - "$TEST_TMP/get" <<'EOF' || fail "observed violations not recorded: $(head -c 1500 "$TEST_TMP/get")"
import json, sys
items = json.load(open(sys.argv[1]))["items"]
found = [e.get("detail", "") for e in items if e.get("code") == "ComplianceViolation"]
assert any("unmatched_tool_result" in d for d in found), found
assert any("duplicate_tool_result" in d for d in found), found
assert items[0]["id"] == "00000901-0000-4000-8000-000000000001", items[0]
EOF

# an OpenCode export, straight from its vector
/usr/bin/python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["input"]["main"], open(sys.argv[2], "w"))' \
    "$VEC/opencode_tools.json" "$TEST_TMP/opencode.json"
expect_status 0 "$PARLEY" import "$TEST_TMP/opencode.json" --url "$url"
get "/api/conversations/$(cat "$TEST_TMP/out")/events/search?limit=100"
expect_grep '"id":"prt_2a1b2c3d0006-result"' "$TEST_TMP/get"

# the imported log, as NDJSON and as an OpenHands conversation directory
get "/api/conversations/$cid/events/search?limit=100"
/usr/bin/python3 - "$TEST_TMP/get" "$TEST_TMP/log.ndjson" "$TEST_TMP/ohdir" <<'EOF'
import json, os, sys
items = json.load(open(sys.argv[1]))["items"]
open(sys.argv[2], "w").write("".join(json.dumps(e) + "\n" for e in items))
os.makedirs(sys.argv[3] + "/events")
for i, e in enumerate(items):
    json.dump(e, open("%s/events/event-%05d-%s.json" % (sys.argv[3], i, e["id"]), "w"))
EOF

# cut short, then finished with --into: the same log as an import in one go
big="$TEST_TMP/big.jsonl"
/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import import_rate; import_rate.transcript(sys.argv[2], 1500)' \
    "$(dirname "$0")/../../bench" "$big"
expect_status 0 "$PARLEY" import "$big" --url "$url"
get "/api/conversations/$(cat "$TEST_TMP/out")/events/count"
whole=$(cat "$TEST_TMP/get")
"$PARLEY" import "$big" --url "$url" >/dev/null 2>"$TEST_TMP/cut.err" &
ipid=$!
for _ in $(seq 6000); do # until it says where it imports (or it is done): then SIGKILL
    grep -q 'importing into' "$TEST_TMP/cut.err" && break
    kill -0 "$ipid" 2>/dev/null || break
    sleep 0.01 # a poll of its stderr, not a wait for time to pass
done
kill -KILL "$ipid" 2>/dev/null || true
wait "$ipid" || true
cut=$(sed -n 's/.*importing into \([0-9a-f-]*\) .*/\1/p' "$TEST_TMP/cut.err")
[ -n "$cut" ] || fail "no 'importing into ID' from a long import: $(cat "$TEST_TMP/cut.err")"
expect_status 0 "$PARLEY" import "$big" --url "$url" --into "$cut"
[ "$(cat "$TEST_TMP/out")" = "$cut" ] || fail "--into printed $(cat "$TEST_TMP/out"), not $cut"
get "/api/conversations/$cut/events/count"
[ "$(cat "$TEST_TMP/get")" = "$whole" ] || fail "resumed: $(cat "$TEST_TMP/get") events, not $whole"
expect_status 0 "$PARLEY" import "$big" --url "$url" --into "$cut" # nothing left to do
get "/api/conversations/$cut/events/count"
[ "$(cat "$TEST_TMP/get")" = "$whole" ] || fail "a second --into added events"
expect_status 1 "$PARLEY" import "$big" --url "$url" --into 00000000000000000000000000000000
expect_grep "404" "$TEST_TMP/err"
expect_status 2 "$PARLEY" import "$big" --url "$url" --into nonsense
expect_grep "wants a conversation id" "$TEST_TMP/err"

kill -TERM "$SRV_PID"
wait "$SRV_PID" || fail "serve did not stop cleanly"

# ---- blocks ----------------------------------------------------------------
n=0
for v in "$VEC"/*.json; do
    expect_status 0 "$PARLEY" blocks "$v"
    /usr/bin/python3 "$here/blocks_compare.py" "$v" "$TEST_TMP/out" >"$TEST_TMP/diff" ||
        fail "parley blocks $(basename "$v") differs from its expected: $(cat "$TEST_TMP/diff")"
    n=$((n + 1))
done
[ "$n" -ge 27 ] || fail "only $n vectors compared"
# the transcript file itself reduces as its vector does
expect_status 0 "$PARLEY" blocks "$good"
cp "$TEST_TMP/out" "$TEST_TMP/from_file.json"
expect_status 0 "$PARLEY" blocks "$VEC/claude_parallel_tools.json"
cmp -s "$TEST_TMP/out" "$TEST_TMP/from_file.json" || fail "blocks of the JSONL differ from the vector's"
# the imported events reduce to the blocks the transcript does (ids aside:
# the transcript's are the API message's, the log's the events')
expect_status 0 "$PARLEY" blocks "$TEST_TMP/log.ndjson"
cp "$TEST_TMP/out" "$TEST_TMP/from_log.json"
expect_status 0 "$PARLEY" blocks "$TEST_TMP/ohdir"
cmp -s "$TEST_TMP/out" "$TEST_TMP/from_log.json" || fail "blocks of the directory differ from the NDJSON's"
/usr/bin/python3 - "$TEST_TMP/from_log.json" "$TEST_TMP/from_file.json" <<'EOF' ||
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
strip = lambda s: [(x["type"], x.get("content"), x.get("toolUseId"), x.get("isError")) for x in s["blocks"]]
assert strip(a) == strip(b), (strip(a), strip(b))
EOF
    fail "the imported log reduces to other blocks than its transcript"
expect_status 0 "$PARLEY" blocks "$TEST_TMP/opencode.json"
expect_grep '"id":"result-prt_2a1b2c3d0006"' "$TEST_TMP/out"
expect_status 2 "$PARLEY" blocks "$TEST_TMP/nope.jsonl"
expect_status 2 "$PARLEY" blocks
echo "ok"
