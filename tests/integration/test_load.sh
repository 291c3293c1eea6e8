#!/usr/bin/env bash
# test_load.sh - `parley load` against a real `parley serve`: short runs
# (closed loop, open loop with a stalled subscriber, batches, subscribers cut
# and resuming with --faults) each end with
# verdict "pass", and what they acknowledged is in the server's log.
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/load_test.py"
