#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_tls.sh - `parley serve --tls-cert --tls-key` with real clients: a
# self-signed EC P-256 certificate made here; the https:// announcement;
# openssl s_client handshakes (TLS 1.2 with an AEAD suite, GET /alive
# through it); curl GET and POST with the certificate as CA; TLS 1.0/1.1,
# CBC-only and TLS 1.3-only clients refused; an RSA certificate; plain
# HTTP on the TLS port closed; bad certificate and key files: exit 1 with
# one line on stderr naming the file. The byte-level cases (close_notify,
# records, a trickled handshake) are in tls_raw.py.
. "$(dirname "$0")/lib.sh"

command -v openssl >/dev/null || fail "openssl is needed (Debian package openssl)"
command -v curl >/dev/null || fail "curl is needed (Debian package curl)"
[ -x /usr/bin/python3 ] || fail "/usr/bin/python3 is needed"
unset SESSION_API_KEY
HERE=$(cd "$(dirname "$0")" && pwd)

SERVERS=()
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    local p
    for p in "${SERVERS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$TEST_TMP"
}
trap cleanup EXIT

cd "$TEST_TMP" || fail "cannot enter $TEST_TMP"
mkcert() { # mkcert KEYFILE CERTFILE KEYSPEC...
    local key=$1 cert=$2
    shift 2
    openssl req -x509 "$@" -nodes -keyout "$key" -out "$cert" -days 1 -subj /CN=localhost \
        -addext subjectAltName=IP:127.0.0.1,DNS:localhost >openssl.log 2>&1 ||
        fail "openssl req failed: $(cat openssl.log)"
}
mkcert k.pem c.pem -newkey ec -pkeyopt ec_paramgen_curve:P-256
mkcert k2.pem c2.pem -newkey ec -pkeyopt ec_paramgen_curve:P-256
mkcert rk.pem rc.pem -newkey rsa:2048

# start NAME ARGS...: serve in the background; PORT from its first line
# (read from a fifo: no sleeping), PID appended to SERVERS.
start() {
    local name=$1 line fd
    shift
    mkfifo "$name.fifo"
    "$PARLEY" serve --data "$TEST_TMP/$name" --listen 127.0.0.1:0 --log-level warn "$@" \
        >"$name.fifo" 2>"$name.err" &
    PID=$!
    SERVERS+=("$PID")
    exec {fd}<"$name.fifo"
    read -r -t 60 -u "$fd" line || fail "$name: serve printed nothing within 60 s: $(cat "$name.err")"
    [[ "$line" =~ ^listening\ on\ https://127\.0\.0\.1:([0-9]+)$ ]] ||
        fail "$name: first line '$line', wanted 'listening on https://127.0.0.1:PORT'"
    PORT=${BASH_REMATCH[1]}
}

# stop PID NAME: SIGTERM, a clean exit, no sanitizer report.
stop() {
    local rc=0 p left=()
    kill -TERM "$1"
    wait "$1" || rc=$?
    for p in "${SERVERS[@]}"; do
        [ "$p" = "$1" ] || left+=("$p")
    done
    SERVERS=("${left[@]}")
    [ "$rc" -eq 0 ] || fail "$2: serve exited $rc after SIGTERM: $(tail -c 2000 "$2.err")"
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$2.err"; then
        fail "$2: sanitizer report: $(head -c 3000 "$2.err")"
    fi
}

start main --tls-cert c.pem --tls-key k.pem --workers 2
MAIN_PID=$PID MAIN_PORT=$PORT
URL=https://127.0.0.1:$MAIN_PORT

# s_client NAME ARGS...: a handshake, with stdin as the plaintext to send;
# -ign_eof: read until the server closes (the requests say Connection: close)
s_client() {
    local name=$1 rc=0
    shift
    timeout 60 openssl s_client -connect "127.0.0.1:$MAIN_PORT" -servername localhost \
        "$@" >"$name.out" 2>"$name.err" || rc=$?
    [ "$rc" -ne 124 ] || fail "openssl s_client $* hung"
    return 0
}
REQ='GET /alive HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'

# a real TLS 1.2 handshake with an AEAD suite, and a request through it
printf '%b' "$REQ" | s_client s12 -tls1_2 -CAfile c.pem -verify_return_error -ign_eof
expect_grep '^ +Protocol +: TLSv1\.2$' s12.out
expect_grep '^ +Cipher +: ECDHE-ECDSA-[A-Z0-9-]*(GCM|CHACHA20)' s12.out
expect_grep 'Verify return code: 0 \(ok\)' s12.out
expect_grep '^HTTP/1\.1 200 OK' s12.out
expect_grep '^\{"status":"ok"\}' s12.out

# each AEAD suite the server offers, and the default (best) choice
for suite in ECDHE-ECDSA-AES128-GCM-SHA256 ECDHE-ECDSA-AES256-GCM-SHA384 \
    ECDHE-ECDSA-CHACHA20-POLY1305; do
    printf '%b' "$REQ" | s_client "suite-$suite" -tls1_2 -cipher "$suite" -CAfile c.pem -ign_eof
    expect_grep "^ +Cipher +: $suite\$" "suite-$suite.out"
    expect_grep '^HTTP/1\.1 200 OK' "suite-$suite.out"
done
s_client default -CAfile c.pem </dev/null
expect_grep '^ +Protocol +: TLSv1\.2$' default.out
expect_grep '^ +Cipher +: ECDHE-ECDSA-AES128-GCM-SHA256$' default.out

# refused: TLS 1.0 and 1.1 (the client is allowed to try them), a CBC-only
# suite, TLS 1.3 only; the refusal comes from the server (a hello went out,
# an alert came back), and nothing is negotiated
refused() { # refused NAME ARGS...
    local name=$1
    shift
    s_client "$name" "$@" </dev/null
    grep -qE 'written [1-9][0-9]* bytes' "$name.out" || fail "$name: no ClientHello was sent: $(cat "$name.err")"
    grep -qE 'Cipher is \(NONE\)' "$name.out" || fail "$name: the handshake succeeded: $(grep -E 'Protocol|Cipher' "$name.out")"
    grep -qE 'alert (protocol version|handshake failure)' "$name.err" ||
        fail "$name: no alert from the server: $(cat "$name.err")"
}
refused tls10 -tls1 -cipher 'DEFAULT@SECLEVEL=0'
refused tls11 -tls1_1 -cipher 'DEFAULT@SECLEVEL=0'
refused cbc -tls1_2 -cipher ECDHE-ECDSA-AES128-SHA256
refused cbc-sha1 -tls1_2 -cipher ECDHE-ECDSA-AES128-SHA
refused tls13 -tls1_3

# curl: GET, and a conversation created and read back over TLS
out=$(curl -sS --max-time 60 --cacert c.pem "$URL/alive") || fail "curl GET /alive failed"
[ "$out" = '{"status":"ok"}' ] || fail "GET /alive over TLS: $out"
code=$(curl -sS --max-time 60 --cacert c.pem -o created.json -w '%{http_code}' \
    -H 'Content-Type: application/json' -d '{"title":"over tls"}' "$URL/api/conversations") ||
    fail "curl POST failed"
[ "$code" = 201 ] || fail "POST /api/conversations over TLS answered $code: $(cat created.json)"
id=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' created.json)
out=$(curl -sS --max-time 60 --cacert c.pem "$URL/api/conversations/$id") || fail "curl GET $id failed"
[[ "$out" == *'"title":"over tls"'* ]] || fail "the conversation read back over TLS: $out"
# curl refuses the server with another CA: the certificate is what is served
if curl -sS --max-time 60 --cacert c2.pem "$URL/alive" >/dev/null 2>curl.err; then
    fail "curl trusted the server with the wrong CA"
fi

# the byte-level cases, with a second server with short time limits
start slow --tls-cert c.pem --tls-key k.pem --header-timeout 300ms --idle-timeout 500ms
SLOW_PID=$PID SLOW_PORT=$PORT
# (its failures are reported at the end, after the other checks ran)
raw_rc=0
/usr/bin/python3 "$HERE/tls_raw.py" "$MAIN_PORT" "$SLOW_PORT" c.pem 2>raw.err || raw_rc=$?

# still serving after all that
out=$(curl -sS --max-time 60 --cacert c.pem "$URL/alive") || fail "curl GET /alive failed at the end"
[ "$out" = '{"status":"ok"}' ] || fail "GET /alive at the end: $out"
stop "$SLOW_PID" slow
stop "$MAIN_PID" main

# an RSA certificate works too (ECDHE-RSA with an AEAD suite)
start rsa --tls-cert rc.pem --tls-key rk.pem
MAIN_PORT=$PORT
printf '%b' "$REQ" | s_client rsa -tls1_2 -CAfile rc.pem -verify_return_error -ign_eof
expect_grep '^ +Cipher +: ECDHE-RSA-AES128-GCM-SHA256$' rsa.out
expect_grep '^HTTP/1\.1 200 OK' rsa.out
stop "$PID" rsa

# bad files: exit 1, one line on stderr that names the file
echo garbage >garbage.pem
: >empty.pem
mkdir adir
bad() { # bad FILE-TO-NAME CERT KEY
    local rc=0
    timeout 60 "$PARLEY" serve --data "$TEST_TMP/bad" --listen 127.0.0.1:0 --log-level warn \
        --tls-cert "$2" --tls-key "$3" >bad.out 2>bad.err || rc=$?
    [ "$rc" -eq 1 ] || fail "serve --tls-cert $2 --tls-key $3 exited $rc, wanted 1: $(cat bad.err)"
    [ ! -s bad.out ] || fail "serve --tls-cert $2 --tls-key $3 printed: $(cat bad.out)"
    [ "$(wc -l <bad.err)" -eq 1 ] || fail "serve --tls-cert $2 --tls-key $3: not one line: $(cat bad.err)"
    grep -qF -- "$1" bad.err || fail "serve --tls-cert $2 --tls-key $3 does not name $1: $(cat bad.err)"
}
bad /nonexistent/k.pem c.pem /nonexistent/k.pem
bad /nonexistent/c.pem /nonexistent/c.pem k.pem
bad garbage.pem c.pem garbage.pem
bad garbage.pem garbage.pem k.pem
bad empty.pem c.pem empty.pem
bad empty.pem empty.pem k.pem
bad adir c.pem adir
bad k2.pem c.pem k2.pem   # a key that is not the certificate's
bad c.pem c.pem c.pem     # a certificate where the key should be
bad k.pem k.pem k.pem     # a key where the certificate should be

[ "$raw_rc" -eq 0 ] || fail "tls_raw.py: $(cat raw.err)"
exit 0
