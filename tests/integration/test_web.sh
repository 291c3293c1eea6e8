#!/usr/bin/env bash
# test_web.sh - the web pages (GET /, /conversations/{id}) in a real browser
# (web_test.js, run_browser_test in lib.sh). web_test.js starts and stops its
# own servers; screenshots go to build/test-artifacts/web (next to $PARLEY)
# or $PARLEY_ARTIFACTS.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
run_browser_test web_test.js web
