#!/usr/bin/env bash
# test_disk_full.sh - a full disk is said as such (507) and nothing is lost
# (disk_full_test.py), on a real tmpfs mounted in a user and mount namespace
# of its own (unshare: no privileges needed where user namespaces are on).
set -euo pipefail
: "${PARLEY:?PARLEY must point at the parley binary (ctest sets it)}"
unshare --user --map-root-user --mount true 2>/dev/null || {
    echo "FAIL: cannot make a user and mount namespace (unshare): this test needs" \
        "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or root" >&2
    exit 1
}
exec unshare --user --map-root-user --mount /usr/bin/python3 -B "$(dirname "$0")/disk_full_test.py"
