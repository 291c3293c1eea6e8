#!/usr/bin/env bash
# test_idle.sh - idle conversations close their logs and open them again with
# their state; running out of open files is a clean 503 (idle_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/idle_test.py"
