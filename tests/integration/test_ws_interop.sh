#!/usr/bin/env bash
# test_ws_interop.sh - WebSocket streams against Python's websockets (Debian):
# auth, close codes, full_state, replay modes, resume, envelopes, client
# frames, 422s before the upgrade, and 50 clients connecting while a
# producer appends, each getting every event once, in order.
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/ws_interop_test.py"
