#!/usr/bin/env bash
# test_api.sh - the REST API against a real `parley serve`: every route, the
# producer route and the compliance gate over HTTP, auth, and a restart on
# the same data directory (api_test.py, Python standard library only).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/api_test.py"
