#!/usr/bin/env bash
# test.sh - quick start (2): install what is missing, build, and run the whole
# test suite through ctest: once in a plain build, once under ASan+UBSan, and
# the unit suites once more under TSan and once in a build without libnats
# (-DPARLEY_NATS=OFF). Warnings are errors, and the NATS JetStream store must
# be built (libnats) everywhere else. Exits non-zero if anything fails.
#
#   tools/test.sh           everything (what CI runs)
#   tools/test.sh --quick   the plain build and the one without libnats
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
    --quick) quick=1 ;;
    "") ;;
    *) echo "usage: tools/test.sh [--quick]" >&2; exit 2 ;;
esac
tools/bootstrap.sh
jobs=$(nproc)

suite() { # suite DIR LABEL-REGEX CMAKE-ARGS...
    local dir=$1 regex=$2
    shift 2
    echo "== $dir: configure and build" >&2
    cmake -S . -B "$dir" -DPARLEY_WERROR=ON -DPARLEY_REQUIRE_NATS=ON "$@" >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
    echo "== $dir: ctest" >&2
    local run=()
    # TSan cannot map its shadow memory on kernels with more address-space
    # randomization bits than it expects; it works with randomization off.
    if [ "$dir" = build-tsan ] && ! "$dir/test_units" >/dev/null 2>&1; then
        run=(setarch "$(uname -m)" -R)
        echo "== $dir: running with address-space randomization off for TSan" >&2
    fi
    (cd "$dir" && "${run[@]}" ctest --output-on-failure -j"$jobs" -R "$regex")
}

suite build '.' -DCMAKE_BUILD_TYPE=RelWithDebInfo
# without libnats (the store left out), as where it is missing: it builds,
# and the unit suites pass. In Release, as tools/run.sh (quick start 1)
# builds: gcc warns about other things at -O3 than at -O2, and a warning
# there once broke the quick start while every stage here passed.
suite build-nonats '^unit/' -DCMAKE_BUILD_TYPE=Release -DPARLEY_NATS=OFF \
    -DPARLEY_REQUIRE_NATS=OFF
if [ $quick -eq 0 ]; then
    suite build-asan '.' -DCMAKE_BUILD_TYPE=Debug -DPARLEY_SANITIZE=address,undefined
    suite build-tsan '^unit/' -DCMAKE_BUILD_TYPE=Debug -DPARLEY_SANITIZE=thread
fi
echo "== all tests passed" >&2
