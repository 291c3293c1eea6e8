#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_malformed.sh - hostile HTTP/1.1 over raw sockets against a real
# `parley serve`: request smuggling shapes (Content-Length with
# Transfer-Encoding, repeated lengths, bad chunks), bare LFs, bad header
# names, obs-fold, bad versions, header/body/line limits (431, 413),
# Expect, header and idle deadlines (408, slowloris), pipelining, the
# connection cap (503), bad bodies and percent-encoding. Each refusal is
# one line of {"detail": ...} JSON followed by a close, and the server
# answers GET /alive afterwards. The cases are in malformed.py (python3,
# standard library only).
. "$(dirname "$0")/lib.sh"

[ -x /usr/bin/python3 ] || fail "/usr/bin/python3 is needed"
/usr/bin/python3 "$(dirname "$0")/malformed.py" "$TEST_TMP" || fail "malformed.py: see the failures above"
