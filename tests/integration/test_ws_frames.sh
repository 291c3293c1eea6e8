#!/usr/bin/env bash
# test_ws_frames.sh - malformed WebSocket frames close that connection with
# the RFC's code and leave the others alone; a client that stops reading is
# closed with 1013 while the others keep receiving (raw sockets).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/ws_frames_test.py"
