#!/usr/bin/env bash
# fuzz.sh - build one libFuzzer target (tests/fuzz/fuzz_*.c) with clang,
# ASan and UBSan, and run it for a while over its seed corpus.
#
#   tools/fuzz.sh TARGET [SECONDS] [-- LIBFUZZER-FLAGS...]
#   tools/fuzz.sh --list
#
# TARGET is fuzz_ws or just ws; SECONDS defaults to 60. The build is
# build-fuzz/ (clang: tools/bootstrap.sh --fuzz). The run reads
# tests/fuzz/corpus/TARGET (and tests/fuzz/TARGET.dict, if there is one) and
# writes what it finds to a scratch directory, build-fuzz/fuzz-out/TARGET
# (FUZZ_OUT=DIR for another): new inputs to corpus/, a crash, leak or
# timeout as crash-*, leak-*, timeout-*. Never into the repository's corpus:
# copy an input there by hand to keep it.
#
# Exit status: 0 nothing found, 1 a finding (its file is named), 2 bad usage
# or a failed build.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"
}
targets() {
    for f in tests/fuzz/fuzz_*.c; do basename "$f" .c; done
}
bad() {
    echo "fuzz.sh: $1 (tools/fuzz.sh --help)" >&2
    exit 2
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --list) targets; exit 0 ;;
    "" | -*) bad "name a target: $(targets | tr '\n' ' ')" ;;
esac
target=$1
shift
[[ "$target" == fuzz_* ]] || target=fuzz_$target
[ -f "tests/fuzz/$target.c" ] || bad "no target $target: $(targets | tr '\n' ' ')"
secs=60
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    [[ "$1" =~ ^[1-9][0-9]*$ ]] || bad "SECONDS must be a whole number above 0, not '$1'"
    secs=$1
    shift
fi
if [ $# -gt 0 ]; then
    [ "$1" = -- ] || bad "unexpected '$1'"
    shift
fi
command -v clang >/dev/null || bad "clang is missing: run tools/bootstrap.sh --fuzz"

build="build-fuzz"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== building $target in $build" >&2
if ! { CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARLEY_FUZZ=ON \
    -DPARLEY_SANITIZE=address,undefined -DPARLEY_WERROR=ON &&
    cmake --build "$build" --target "$target" -j"$(nproc)"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    bad "building $target in $build failed"
fi

out=${FUZZ_OUT:-$build/fuzz-out/$target}
mkdir -p "$out/corpus"
flags=(-max_total_time="$secs" -artifact_prefix="$out/" -print_final_stats=1)
[ -f "tests/fuzz/$target.dict" ] && flags+=(-dict="tests/fuzz/$target.dict")
dirs=("$out/corpus") # the first one is where libFuzzer adds what it finds
[ -d "tests/fuzz/corpus/$target" ] && dirs+=("tests/fuzz/corpus/$target")
echo "== $target for $secs s over ${dirs[*]}; findings in $out" >&2
rc=0
"$build/$target" "${flags[@]}" "$@" "${dirs[@]}" || rc=$?
if [ "$rc" -ne 0 ]; then
    found=$(ls -t "$out"/{crash,leak,timeout,oom}-* 2>/dev/null | head -1 || true)
    echo "fuzz.sh: $target failed (exit $rc): ${found:-see its output above}" >&2
    exit 1
fi
echo "== $target: nothing found; $(find "$out/corpus" -type f | wc -l) inputs in $out/corpus" >&2
