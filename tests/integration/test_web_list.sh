#!/usr/bin/env bash
# test_web_list.sh - the page of conversations (GET /) in a real browser:
# paging, sorting and filtering 122 conversations, violations and stuck
# findings counted, live rows, the chart of the server's figures, the key
# prompt (web_list_test.js, run_browser_test in lib.sh). Screenshots go to
# build/test-artifacts/web-list (next to $PARLEY) or $PARLEY_ARTIFACTS.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
run_browser_test web_list_test.js web-list
