#!/usr/bin/env bash
# test_example.sh - the embedding API as an embedder gets it: the build that
# made $PARLEY is installed into a temporary prefix (cmake --install), the
# example examples/embed_agent.c is compiled against that prefix alone
# (pkg-config --cflags --libs parley, nothing from the source tree), and
# run: it hosts a conversation and a scripted agent actor that crashes
# once and is restarted by its supervisor, and checks the log.
. "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(dirname "$PARLEY")
[ -f "$build/CMakeCache.txt" ] || fail "$build is not a CMake build directory"
command -v pkg-config >/dev/null || fail "pkg-config is needed"

prefix="$TEST_TMP/prefix"
cmake --install "$build" --prefix "$prefix" >"$TEST_TMP/install.log" 2>&1 ||
    fail "cmake --install: $(tail -5 "$TEST_TMP/install.log")"
for f in bin/parley lib/libparley.a include/parley.h lib/pkgconfig/parley.pc; do
    [ -e "$prefix/$f" ] || fail "the install has no $f"
done
# the public header stands alone: no internal header is installed or needed
[ "$(find "$prefix/include" -type f | wc -l)" -eq 1 ] || fail "more than parley.h installed"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs parley) || fail "pkg-config does not know parley"
cp "$root/examples/embed_agent.c" "$TEST_TMP/"
(cd "$TEST_TMP" && cc -std=c11 -Wall -Wextra -Werror embed_agent.c $flags -o embed_agent) \
    >"$TEST_TMP/cc.log" 2>&1 || fail "the example does not build: $(cat "$TEST_TMP/cc.log")"

expect_status 0 "$TEST_TMP/embed_agent" "$TEST_TMP/data"
expect_grep '^agent: crashing on purpose with call-2 pending$' "$TEST_TMP/out"
expect_grep 'the agent started [2-9] times' "$TEST_TMP/out"
expect_grep '^gate: rejected: unmatched_tool_result: ' "$TEST_TMP/out"
expect_grep '^ok: [0-9]+ events seen by the subscription; the log is valid$' "$TEST_TMP/out"
# what it left on disk is a data directory parley serves: the same log
[ -d "$TEST_TMP/data/pool" ] || fail "no store on disk (a new directory's is the pool)"
mkfifo "$TEST_TMP/announce"
"$prefix/bin/parley" serve --data "$TEST_TMP/data" --listen 127.0.0.1:0 --log-level warn \
    >"$TEST_TMP/announce" 2>"$TEST_TMP/serve.err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$TEST_TMP"' EXIT
exec 3<"$TEST_TMP/announce"
read -r -t 30 line <&3 || fail "serve did not announce itself: $(cat "$TEST_TMP/serve.err")"
url=${line#listening on }
[ "$url" != "$line" ] || fail "serve said '$line'"
id=$(curl -sf "$url/api/conversations/search?limit=2" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["items"]; print(r[0]["id"] if len(r)==1 else "")') ||
    fail "cannot list the conversations"
[ -n "$id" ] || fail "not one conversation on disk"
n=$(curl -sf "$url/api/conversations/$id/events/count") || fail "cannot count the events"
[ "$n" = 11 ] || fail "serve counts $n events, the example wrote 11"
kill -TERM $pid
wait $pid || fail "serve did not stop cleanly"
exec 3<&-
trap 'rm -rf "$TEST_TMP"' EXIT
echo "ok"
