#!/usr/bin/env bash
# test_acp_host.sh - hosted agents: real ACP agents (on the official SDK,
# and parley's demo agent) run by a real `parley serve`, every log linted
# (acp_host_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
command -v node >/dev/null || { echo "node is missing: run tools/bootstrap.sh" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/acp_host_test.py"
