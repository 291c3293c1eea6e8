#!/usr/bin/env bash
# test_client.sh - parley's client commands against a real server
# (client_test.py): tail's cost and resume with --cache over a 100,000-event
# conversation (k new events in <= ceil(k/100)+2 requests), --last N and the
# default last 10, TLS end to end (--ca-file, --insecure, verification
# failures, wrong keys, --follow --until-done over wss://), --until-done
# (finished/error/stuck), send with and without --run, append from a file
# and stdin with refusals, conversations (plain and --json), 4004 and usage,
# --cache with --follow (written back at SIGTERM/SIGINT), a diverging cache.
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
[ -x /usr/bin/python3 ] || { echo "FAIL: /usr/bin/python3 is needed" >&2; exit 1; }
command -v openssl >/dev/null || { echo "FAIL: openssl is needed" >&2; exit 1; }
exec /usr/bin/python3 -B "$(dirname "$0")/client_test.py" "$@"
