#!/usr/bin/env bash
# test_ws_node.sh - WebSocket streams against node's `ws` client (npm,
# installed by tools/bootstrap.sh into tests/node/node_modules): auth and
# close codes, full_state first, replay, live, after_id, envelopes, the cap.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$here/../node/node_modules/ws" ] || fail "node ws is missing: run tools/bootstrap.sh"
coproc SRV { exec "$PARLEY" serve --data "$TEST_TMP/data" --listen 127.0.0.1:0 \
    --api-key nodekey --ws-max-subscribers 3 --log-level warn 2>"$TEST_TMP/serve.err"; }
pid=$SRV_PID
read -r -t 60 -u "${SRV[0]}" line || fail "serve printed nothing within 60 s"
[[ "$line" =~ ^listening\ on\ http://127\.0\.0\.1:([0-9]+)$ ]] || fail "unexpected first line: $line"
node "$here/ws_node_test.js" "${BASH_REMATCH[1]}" nodekey || {
    kill -TERM "$pid"
    fail "the node client failed; serve's stderr: $(cat "$TEST_TMP/serve.err")"
}
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "serve exited $rc after SIGTERM: $(cat "$TEST_TMP/serve.err")"
