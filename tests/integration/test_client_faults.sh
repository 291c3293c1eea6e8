#!/usr/bin/env bash
# test_client_faults.sh - `parley tail --follow --json --from-start` through
# fault_proxy.py (WebSocket frames dropped, duplicated, reordered, connections
# cut, REST responses cut) while producers append at full speed: once the
# faults stop, its output is exactly the server's log; with envelope=index,
# with --no-index, --until-done with the faults left on, and across a server
# restart (client_faults_test.py). SEED=<int> repeats a run.
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
[ -x /usr/bin/python3 ] || { echo "FAIL: /usr/bin/python3 is needed" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/client_faults_test.py" "$@"
