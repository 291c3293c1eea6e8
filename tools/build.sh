#!/usr/bin/env bash
# build.sh - a Release build of parley into DIR whose parley command is
# optimized from a profile of itself at work (PGO, CMakeLists.txt): built
# instrumented (PARLEY_PGO=generate), run for a few seconds under `parley
# load`'s realistic mix against `parley serve` on 127.0.0.1, built again
# from what that run counted (PARLEY_PGO=use). Then the TARGETs (default:
# everything) are built. tools/run.sh and the benchmarks build this way.
#
#   tools/build.sh DIR [TARGET...]
set -euo pipefail
case "${1:-}" in
    "" | -h | --help)
        sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
        [ -n "${1:-}" ] && exit 0 || exit 2 ;;
esac
dir=$(realpath -m "$1") # as given, before the cd
shift
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPARLEY_PGO=generate >/dev/null
cmake --build "$dir" -j"$jobs" --target parley >/dev/null
find "$dir" -name '*.gcda' -delete # this run's counts only

# The training run: a fresh server on a free port in a scratch directory,
# loaded for 5 s, stopped by SIGTERM (the counts are written at its exit).
# A run that fails leaves a build without a profile, said so, not a failed
# build.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/parley-pgo.XXXXXX")
server=
cleanup() {
    [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" || true
    rm -rf "$tmp"
}
trap cleanup EXIT
echo "build.sh: training the parley command (5 s of parley load)" >&2
"$dir/parley" serve --data "$tmp/data" --listen 127.0.0.1:0 --log-level warn >"$tmp/out" 2>&1 &
server=$!
url=
for _ in $(seq 300); do # up to 30 s to start
    url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/out" | head -1 || true)
    if [ -n "$url" ] || ! kill -0 "$server" 2>/dev/null; then
        break
    fi
    sleep 0.1
done
if [ -z "$url" ] || ! "$dir/parley" load "$url" --mix realistic --conversations 8 --producers 2 \
    --subscribers 4 --readers 2 --duration 5s >"$tmp/load" 2>&1; then
    echo "build.sh: the training run failed; building without a profile:" >&2
    tail -5 "$tmp/out" "$tmp/load" >&2 2>/dev/null || true
fi
kill -TERM "$server" 2>/dev/null && wait "$server" || true
server=

cmake -S . -B "$dir" -DPARLEY_PGO=use >/dev/null
if [ $# -gt 0 ]; then
    cmake --build "$dir" -j"$jobs" --target "$@" >/dev/null
else
    cmake --build "$dir" -j"$jobs" >/dev/null
fi
