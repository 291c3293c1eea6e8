#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_cli.sh - the command line: --help everywhere, exit status 2 with a
# one-line reason on bad usage, and `parley serve` starting, announcing
# itself and stopping cleanly (exit 0) on SIGTERM and SIGINT.
. "$(dirname "$0")/lib.sh"

expect_status 0 "$PARLEY" --help
expect_grep '^commands:' "$TEST_TMP/out"
expect_status 0 "$PARLEY" --version
expect_grep '^parley [0-9]+\.[0-9]+\.[0-9]+' "$TEST_TMP/out"
# and the malloc it runs on, found at run time: the build's (CMakeLists.txt)
expect_grep "^parley [0-9.]+ \\(${PARLEY_ALLOC:-(mimalloc|glibc malloc)}( [0-9.]+)?\\)\$" "$TEST_TMP/out"
for cmd in serve bench "bench runtime" "bench store" "bench conversation"; do
    # shellcheck disable=SC2086
    expect_status 0 "$PARLEY" $cmd --help
    expect_grep '^usage: parley' "$TEST_TMP/out"
done

expect_status 2 "$PARLEY"
expect_status 2 "$PARLEY" frobnicate
expect_grep "unknown command 'frobnicate'" "$TEST_TMP/err"
expect_status 2 "$PARLEY" serve --workers 0
expect_grep 'workers wants a whole number' "$TEST_TMP/err"
expect_status 2 "$PARLEY" serve --workers many
expect_status 2 "$PARLEY" serve --no-such-flag
expect_status 2 "$PARLEY" serve --log-level loud
expect_status 2 "$PARLEY" serve stray-argument
expect_status 2 "$PARLEY" serve --durability sometimes
expect_grep "unknown durability 'sometimes'" "$TEST_TMP/err"
expect_status 2 "$PARLEY" serve --defer-timeout 0
expect_grep 'defer-timeout wants a duration' "$TEST_TMP/err"
expect_status 2 "$PARLEY" serve --defer-timeout 8d
expect_status 2 "$PARLEY" serve --hold-timeout soon
expect_grep "hold-timeout wants a duration .* not 'soon'" "$TEST_TMP/err"
expect_status 2 "$PARLEY" serve --defer-max 0
expect_status 2 "$PARLEY" serve --hold-max 10001
expect_grep 'hold-max wants a whole number' "$TEST_TMP/err"
expect_status 2 "$PARLEY" serve --store nats://127.0.0.1:1 --data pool:"$TEST_TMP/ws"
expect_grep "with --store, --data is a plain directory" "$TEST_TMP/err"
expect_status 2 "$PARLEY" bench nothing
expect_status 2 "$PARLEY" bench runtime --runs 0
[ "$(wc -l <"$TEST_TMP/err")" -eq 1 ] || fail "usage errors must be one line: $(cat "$TEST_TMP/err")"

expect_status 2 "$PARLEY" serve --listen nowhere
expect_status 2 "$PARLEY" serve --listen 127.0.0.1:70000
expect_status 2 "$PARLEY" serve --max-body lots
expect_status 2 "$PARLEY" serve --idle-timeout 0
expect_status 2 "$PARLEY" serve --tls-cert /nonexistent/cert.pem --listen 127.0.0.1:0
expect_grep "needs both --tls-cert and --tls-key" "$TEST_TMP/err"
expect_status 1 "$PARLEY" serve --data "$TEST_TMP/tls" --tls-cert /nonexistent/c.pem \
    --tls-key /nonexistent/k.pem --listen 127.0.0.1:0
expect_grep "/nonexistent/c.pem" "$TEST_TMP/err"

# start_serve NAME ARGS...: `parley serve ARGS` in the background, its
# stdout on a fifo read through srv_fd; srv_pid is its pid. (Not a coproc:
# bash clears a coproc's variables by name when it reaps it, which can be
# after the next coproc of that name has started, and unsets its pid.)
start_serve() {
    local fifo="$TEST_TMP/$1.out"
    shift
    mkfifo "$fifo"
    "$PARLEY" serve "$@" >"$fifo" &
    srv_pid=$!
    exec {srv_fd}<"$fifo"
}

# serve: waits for the announcement on stdout (no sleeping), then a signal.
for sig in TERM INT; do
    data="$TEST_TMP/data-$sig"
    start_serve "serve-$sig" --data "$data" --workers 2 --log-level warn \
        --listen 127.0.0.1:0 --defer-timeout 90s --defer-max 8 --hold-timeout 250ms --hold-max 8
    pid=$srv_pid
    read -r -t 60 -u "$srv_fd" line || fail "serve printed nothing within 60 s"
    [[ "$line" =~ ^listening\ on\ http://127\.0\.0\.1:[0-9]+$ ]] || fail "unexpected first line: $line"
    [ -d "$data" ] || fail "serve did not create its data directory"
    kill -"$sig" "$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "serve exited $rc after SIG$sig, wanted 0"
    exec {srv_fd}<&-
done

# a fatal signal (here an abort(), as libraries call it) is reported on
# stderr, with the thread and a backtrace, and is still the death it was
# (status 128 + 6, a core dump where enabled); a sanitizer's build leaves
# that to the sanitizer
start_serve serve-abrt --data "$TEST_TMP/data-abrt" --log-level warn \
    --listen 127.0.0.1:0 2>"$TEST_TMP/abrt.err"
read -r -t 60 -u "$srv_fd" line || fail "serve printed nothing within 60 s"
kill -ABRT "$srv_pid"
rc=0
wait "$srv_pid" || rc=$?
[ "$rc" -eq 134 ] || fail "serve exited $rc after SIGABRT, wanted 134"
exec {srv_fd}<&-
if [ -z "${PARLEY_SANITIZE:-}" ]; then
    expect_grep '^parley: fatal signal 6 \(ABRT\) in thread [a-z0-9-]+; backtrace:$' \
        "$TEST_TMP/abrt.err"
    expect_grep 'parley\(\+0x[0-9a-f]+\)' "$TEST_TMP/abrt.err"
fi

# a data directory that cannot be created is a clear failure, not a crash
touch "$TEST_TMP/file"
expect_status 1 "$PARLEY" serve --data "$TEST_TMP/file/sub"
expect_grep "cannot create $TEST_TMP/file/sub: Not a directory" "$TEST_TMP/err"

# a directory holding both kinds of store: which one is for the user to say
mkdir -p "$TEST_TMP/both/conversations" "$TEST_TMP/both/pool"
expect_status 1 "$PARLEY" serve --data "$TEST_TMP/both" --listen 127.0.0.1:0
expect_grep "holds both a local store \(conversations/\) and a pool \(pool/\): name one" \
    "$TEST_TMP/err"

# one server per data directory: a second one says who has it
data="$TEST_TMP/shared"
start_serve shared --data "$data" --durability interval=50ms --log-level warn \
    --listen 127.0.0.1:0
read -r -t 60 -u "$srv_fd" line || fail "serve printed nothing within 60 s"
[[ "$line" == "listening on http://127.0.0.1:"* ]] || fail "unexpected first line: $line"
expect_status 1 "$PARLEY" serve --data "$data" --listen 127.0.0.1:0
expect_grep "data directory $data is in use by another process \\(pid $srv_pid\\)" "$TEST_TMP/err"
kill -TERM "$srv_pid"
wait "$srv_pid" || fail "serve did not stop cleanly"
exec {srv_fd}<&-
echo "ok"
