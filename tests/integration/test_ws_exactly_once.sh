#!/usr/bin/env bash
# test_ws_exactly_once.sh - a producer appends over REST without pause while
# 50 WebSocket clients (Python's websockets, envelope=index) subscribe at
# random points (seeded): replay all, resume after an acknowledged event, or
# live only. Each must get every event from its start to the end exactly
# once, in log order, as REST search has them (ws_exactly_once_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
/usr/bin/python3 -c 'import websockets' 2>/dev/null ||
    { echo "FAIL: /usr/bin/python3 has no websockets (Debian python3-websockets)" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/ws_exactly_once_test.py"
