#!/usr/bin/env bash
# test_secrets.sh - a secret given to parley (an LLM's keys, named secrets)
# never comes back in an answer, a log line or a file (secrets_test.py).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
exec /usr/bin/python3 -B "$(dirname "$0")/secrets_test.py"
