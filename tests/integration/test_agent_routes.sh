#!/usr/bin/env bash
# test_agent_routes.sh - the conversation routes about its agent (secrets,
# confirmation policy, fork, navigate, final response, title, and those an
# ACP agent cannot honour) on a real `parley serve` hosting real ACP agents
# (agent_routes_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
command -v node >/dev/null || { echo "node is missing: run tools/bootstrap.sh" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/agent_routes_test.py"
