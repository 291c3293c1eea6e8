#!/usr/bin/env bash
# test_view.sh - the visualizer on a real `parley serve`: GET .../state and
# its after_index polls, the view=blocks WebSocket (state frame, changes,
# resume, exact against /state while a producer appends), idle stop and
# restart, a 5,000-event log, `parley tail --blocks` (view_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/view_test.py"
