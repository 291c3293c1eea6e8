#!/usr/bin/env bash
# test_acp_cmd.sh - `parley acp`, the ACP agent editors spawn, end to end in
# both modes (--url against a real `parley serve`, --data in process),
# driven by the official ACP SDK's client (acp_cmd_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
command -v node >/dev/null || { echo "node is missing: run tools/bootstrap.sh" >&2; exit 1; }
[ -d "$(dirname "$0")/../node/node_modules/@agentclientprotocol/sdk" ] ||
    { echo "the ACP SDK is missing from tests/node/node_modules: run tools/bootstrap.sh" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/acp_cmd_test.py"
