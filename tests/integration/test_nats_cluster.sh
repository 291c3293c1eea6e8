#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# test_nats_cluster.sh - the test clusters' harness itself (nats_cluster.py):
# two clusters side by side on free ports, a node killed and restarted
# healthy, stop leaving no server behind, and `run` passing the URLs in and
# the command's status out.
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"
command -v nats-server >/dev/null || fail "nats-server is missing: run tools/bootstrap.sh"
nc=(/usr/bin/python3 -B "$here/nats_cluster.py")
a=$TEST_TMP/a
b=$TEST_TMP/b
trap '"${nc[@]}" stop "$a" 2>/dev/null; "${nc[@]}" stop "$b" 2>/dev/null; rm -rf "$TEST_TMP"' EXIT

pids() { # the pids a cluster's state names
    /usr/bin/python3 -c 'import json,sys; print(" ".join(str(n["pid"]) for n in json.load(open(sys.argv[1]))["nodes"]))' "$1/cluster.json"
}
port() { # port DIR NODE KIND
    /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][int(sys.argv[2]) - 1][sys.argv[3]])' "$1/cluster.json" "$2" "$3"
}
alive() { # a process that runs (a zombie does not)
    [ -e "/proc/$1" ] && ! grep -q ') Z' "/proc/$1/stat" 2>/dev/null
}

ua=$("${nc[@]}" start "$a")
ub=$("${nc[@]}" start "$b")
[[ $ua =~ ^nats://127\.0\.0\.1:[0-9]+(,nats://127\.0\.0\.1:[0-9]+){2}$ ]] || fail "urls: $ua"
[ "$ua" != "$ub" ] || fail "two clusters got the same ports: $ua"
[ "$("${nc[@]}" urls "$a")" = "$ua" ] || fail "urls differs from start's"

read -r p1 p2 p3 <<<"$(pids "$a")"
for p in $p1 $p2 $p3; do alive "$p" || fail "node $p of a is not running"; done
"${nc[@]}" kill "$a" 2
! alive "$p2" || fail "node 2 ($p2) survived kill"
if ! alive "$p1" || ! alive "$p3"; then fail "kill hit another node"; fi
"${nc[@]}" restart "$a" 2
read -r _ q2 _ <<<"$(pids "$a")"
alive "$q2" || fail "node 2 did not restart"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(port "$a" 2 http)/healthz")
[ "$code" = 200 ] || fail "restarted node 2 answers /healthz with $code"
expect_status 1 "${nc[@]}" restart "$a" 2 # it runs already

"${nc[@]}" stop "$a"
for p in $p1 $q2 $p3; do ! alive "$p" || fail "node $p of a still runs after stop"; done
read -r r1 r2 r3 <<<"$(pids "$b")"
for p in $r1 $r2 $r3; do alive "$p" || fail "stopping a stopped b's node $p"; done
"${nc[@]}" stop "$b"
for p in $r1 $r2 $r3; do ! alive "$p" || fail "node $p of b still runs after stop"; done

# shellcheck disable=SC2016
expect_status 7 "${nc[@]}" run -- sh -c '
    case "$PARLEY_NATS_URLS" in nats://127.0.0.1:*,*,*) ;; *) exit 1 ;; esac
    test -d "$PARLEY_NATS_DIR" && test -f "$PARLEY_NATS_CLUSTER" && exit 7'
expect_grep "kept .*parley-nats-" "$TEST_TMP/err"
kept=$(sed -n 's/^nats_cluster: kept \([^ ]*\) .*/\1/p' "$TEST_TMP/err")
for p in $(pids "$kept"); do [ "$p" = None ] || ! alive "$p" || fail "run left node $p running"; done
rm -rf "$kept"
echo "ok"
