#!/usr/bin/env bash
# test_ws_ping.sh - the server's WebSocket keep-alive pings, over a raw
# socket: answered pings keep a socket, a missing pong closes it (1001).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/ws_ping_test.py"
