#!/usr/bin/env bash
# test_web.sh - the web pages (GET /, /conversations/{id}) in a real browser:
# Debian's chromium, headless, driven by playwright-core from tests/node
# (both installed by tools/bootstrap.sh). web_test.js starts and stops its
# own servers; screenshots go to build/test-artifacts/web (next to $PARLEY)
# or $PARLEY_ARTIFACTS.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$here/../node/node_modules/playwright-core" ] ||
    fail "playwright-core is missing: run tools/bootstrap.sh"
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || fail "$chromium is missing: run tools/bootstrap.sh"
artifacts=${PARLEY_ARTIFACTS:-$(dirname "$PARLEY")/test-artifacts}/web
CHROMIUM=$chromium node "$here/web_test.js" "$PARLEY" "$TEST_TMP" "$artifacts"
