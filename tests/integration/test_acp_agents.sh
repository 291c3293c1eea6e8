#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_acp_agents.sh - the scripted ACP agent that the hosted-agent tests run
# (tests/node/acp_agent.mjs, built on the official @agentclientprotocol/sdk)
# does what its header says, behaviour by behaviour: tests/node/
# acp_agent_selfcheck.mjs drives each one with the SDK's own client over a
# child process and checks every update and stop reason, the raw wire bytes,
# permission answers, cancel, crash and session/load restarts, fs confinement
# and exits on stdin EOF. parley itself is not involved; this keeps the
# agent honest before parley's tests rely on it. The selfcheck's temp files
# go under this test's temp dir, and it stops every agent it starts.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
node_dir="$here/../node"
command -v node >/dev/null || fail "node is missing: run tools/bootstrap.sh"
[ -d "$node_dir/node_modules/@agentclientprotocol/sdk" ] ||
    fail "the ACP SDK is missing from tests/node/node_modules: run tools/bootstrap.sh"

rc=0
TMPDIR="$TEST_TMP" node "$node_dir/acp_agent_selfcheck.mjs" \
    >"$TEST_TMP/selfcheck.out" 2>"$TEST_TMP/selfcheck.err" || rc=$?
cat "$TEST_TMP/selfcheck.out"
[ "$rc" -eq 0 ] || fail "acp_agent_selfcheck.mjs exited $rc; its stderr: $(tail -c 4000 "$TEST_TMP/selfcheck.err")"
grep -qE '^passed [0-9]+ checks$' "$TEST_TMP/selfcheck.out" || fail "the selfcheck did not finish"
# every check cleaned up after itself
left=$(find "$TEST_TMP" -mindepth 1 -maxdepth 1 ! -name 'selfcheck.*')
[ -z "$left" ] || fail "left in the temp dir: $left"
echo "ok"
