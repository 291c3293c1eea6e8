#!/usr/bin/python3
"""disk_full_test.py - a full disk is said as such, and nothing is lost.

Run by test_disk_full.sh inside a user and mount namespace (unshare), so it
can mount a small tmpfs as the data directory: a real full disk, no fault
injection. A filler file takes part of it, to give space back later.

1. Appends of 6 KiB events until the disk is full: the first refusal, and
   every answer while it is full, is 201 (a small write that still fits) or
   507 saying the disk is full; never a 500 or an unexplained 503. Creating
   a conversation and changing its title answer 507 too.
2. Every acknowledged event is in the log, once, at the index it was given.
3. Space comes back (the filler is removed): appends and creation work again
   without a restart, and after a restart every acknowledged event is there.
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_test import all_events, conv_path, new_conv, user_msg  # noqa: E402
from parley_client import Server, check, wait_for  # noqa: E402

BIG = "x" * 6000


def full_answer(r, what):
    """A refusal while the disk is full: 507 naming it."""
    detail = (r.body or {}).get("detail", "") if isinstance(r.body, dict) else ""
    check(r.status == 507 and "disk is full" in detail,
          "%s on a full disk: 507 saying so" % what, r.status, r.body)


def main():
    root = tempfile.mkdtemp(prefix="parley-disk-full.")
    mnt = os.path.join(root, "mnt")
    os.mkdir(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], check=True)
    try:
        run(mnt)
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)
        shutil.rmtree(root, ignore_errors=True)
    print("disk full: ok")


def run(mnt):
    filler = os.path.join(mnt, "filler")
    with open(filler, "wb") as f:
        f.write(b"\0" * (1 << 20))
    # the with stops it, failing or not: no server outlives the test
    with Server(data=os.path.join(mnt, "data")) as srv:
        c = srv.client()
        cid = new_conv(c)
        acked = {}  # event id -> index
        first_refusal = None
        for i in range(2000):
            eid = "e%d" % i
            r = c.post(conv_path(cid, "/events/append"), [user_msg(eid, say="%d %s" % (i, BIG))])
            if r.status == 201:
                acked[eid] = r.body["events"][0]["index"]
                continue
            first_refusal = r
            break
        check(first_refusal is not None, "the disk filled up", len(acked))
        full_answer(first_refusal, "the append that did not fit")
        # while it is full: small writes may still fit, nothing else is said
        for i in range(20):
            eid = "s%d" % i
            r = c.post(conv_path(cid, "/events/append"), [user_msg(eid, say="small %d" % i)])
            if r.status == 201:
                acked[eid] = r.body["events"][0]["index"]
            else:
                full_answer(r, "a small append")
        full_answer(c.post("/api/conversations", {"title": BIG[:150]}), "a create")
        r = c.request("PATCH", conv_path(cid, ""), {"title": "t" + BIG[:150]})
        if r.status != 200:
            full_answer(r, "a title change")

        def logged():
            evs = all_events(c, cid)
            return {e["id"]: i for i, e in enumerate(evs)}
        have = logged()
        for eid, index in acked.items():
            check(have.get(eid) == index, "acknowledged %s at %d is there" % (eid, index), have.get(eid))

        os.remove(filler)  # space comes back

        def works():
            r = c.post(conv_path(cid, "/events/append"), [user_msg("after", say="space again")])
            if r.status == 201:
                acked["after"] = r.body["events"][0]["index"]
                return True
            full_answer(r, "an append while space comes back")
            return False
        wait_for("appends to work again", works)
        new_conv(c)
        srv.stop()
        srv.start()
        c = srv.client()
        have = logged()
        for eid, index in acked.items():
            check(have.get(eid) == index, "after a restart, %s at %d" % (eid, index), have.get(eid))
        check(len(have) == len(acked), "nothing else in the log", len(have), len(acked))


if __name__ == "__main__":
    main()
