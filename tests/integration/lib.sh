# shellcheck shell=bash
# lib.sh - shared by the integration tests: a temp dir per test, checks that
# fail with a message, and the parley binary under test ($PARLEY).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/parley-test.XXXXXX")
trap 'rm -rf "$TEST_TMP"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# expect_status WANT CMD... : run CMD, fail unless it exits with WANT.
expect_status() {
    local want=$1
    shift
    local got=0
    "$@" >"$TEST_TMP/out" 2>"$TEST_TMP/err" || got=$?
    [ "$got" -eq "$want" ] || fail "'$*' exited $got, wanted $want; stderr: $(cat "$TEST_TMP/err")"
}

# expect_grep PATTERN FILE : fail unless FILE matches PATTERN.
expect_grep() {
    grep -qE -- "$1" "$2" || fail "no '$1' in $2: $(head -c 2000 "$2")"
}

# run_browser_test SCRIPT NAME : node tests/integration/SCRIPT PARLEY TMP
# ARTIFACTS, a test of the web pages on Debian's chromium (headless) through
# playwright-core from tests/node (both installed by tools/bootstrap.sh);
# its screenshots go to test-artifacts/NAME next to $PARLEY, or to
# $PARLEY_ARTIFACTS/NAME.
run_browser_test() {
    local here chromium=${CHROMIUM:-/usr/bin/chromium}
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    [ -d "$here/../node/node_modules/playwright-core" ] ||
        fail "playwright-core is missing: run tools/bootstrap.sh"
    [ -x "$chromium" ] || fail "$chromium is missing: run tools/bootstrap.sh"
    CHROMIUM=$chromium node "$here/$1" "$PARLEY" "$TEST_TMP" \
        "${PARLEY_ARTIFACTS:-$(dirname "$PARLEY")/test-artifacts}/$2"
}
