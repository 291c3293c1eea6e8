#!/usr/bin/env bash
# test_ws_stalled.sh - a WebSocket client that never reads (small SO_RCVBUF)
# is closed once its --ws-queue stays full for --ws-stall-timeout, counted
# in /metrics, while three normal clients get every event once, in order,
# and the producer goes on (raw sockets; ws_stalled_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/ws_stalled_test.py"
