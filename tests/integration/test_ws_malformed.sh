#!/usr/bin/env bash
# test_ws_malformed.sh - RFC 6455 protocol errors over raw sockets after a
# real handshake: 1002 (masking, reserved bits and opcodes, bad control
# frames, continuations, close codes), 1007 (invalid UTF-8), 1009 (over
# --ws-max-message); what must stay open; close echoes; a well-behaved
# client on the same conversation unaffected (ws_malformed_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/ws_malformed_test.py"
