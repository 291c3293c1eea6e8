#!/usr/bin/env bash
# test_ws_python.sh - WebSocket streams (/sockets/events/{id}) against
# Python's websockets (Debian python3-websockets): handshake, full_state
# first, live, replay (all, resend_all, since with naive and zone-aware
# times), after_id resume, envelope=index, answers before the upgrade,
# client frames, pings, auth and close codes, the subscriber cap, wss://.
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
/usr/bin/python3 -c 'import websockets' 2>/dev/null ||
    { echo "FAIL: /usr/bin/python3 has no websockets (Debian python3-websockets)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "FAIL: openssl is needed" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/ws_python_test.py"
