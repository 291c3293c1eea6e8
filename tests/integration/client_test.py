"""client_test.py - parley's client commands (`parley tail`, `send`, `append`,
`conversations`; contract: issue 7) against a real `parley serve`:

  (a) cost and resume: a 100,000-event conversation (built with arrays of
      100 events per append, 4 threads); `tail --last 10|100` without a
      cache costs at most 4 requests; `tail --cache F --json` without
      --follow prints the whole log and writes F (NDJSON == the log); then
      k = 250, 1, 0 new events: a rerun with --cache F --stats prints
      exactly the k new events with requests <= ceil(k/100)+2, and F holds
      the whole log again; --last over the cached copy (k = 0 and k = 7).
  (b) without a cache: the default last 10, --last N (0, 5, more than
      there are), --from-start, an empty conversation, the plain format.
  (c) TLS end to end: a self-signed certificate (openssl), serve with
      --tls-cert/--tls-key and --api-key: tail https:// with --ca-file
      (and --follow --until-done over wss://) works; without --ca-file it
      fails (exit 1, stderr says certificate/verify); --insecure works;
      SESSION_API_KEY works; a wrong or missing key is exit 1.
  (d) --follow --until-done: tail in the background, events appended,
      then execution_status running -> finished: exit 0, output == the
      log; --last 3 with --follow; a conversation finished before tail
      starts; the terminal statuses error and stuck.
  (e) send (with and without --run: the conversation's execution_status
      after), append from a file and from stdin (verdict lines with the
      input line numbers, 201/202/409/422, exit 1 after a refusal and the
      rest still appended; exit 0 when all are accepted), conversations
      (plain `ID  STATUS  TITLE` lines and --json, over more than a page).
  (f) tail --follow of an unknown conversation exits 1 quickly; a closed
      port is exit 1; usage errors are exit 2; --help is exit 0.
  (g) --cache with --follow: only new events printed, the copy written
      back at SIGTERM and at SIGINT (exit 0); another conversation's cache
      is a divergence (exit 1); a cache file that is not NDJSON.

Output lines are compared with REST events/search as parsed JSON (dicts),
in order. No sleeps: waits are polled conditions with deadlines; temp dirs
per run; ports are 0. Usage: PARLEY=<binary> /usr/bin/python3 client_test.py
[group ...] (groups a..g; default all).
"""

import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parley_client import Server, check, store  # noqa: E402

T = 60              # seconds for any single command or wait
NO_STUCK = {"stuck_detection": False}
KEY = "client-test-key"
STATS_RE = re.compile(r"^parley tail: stats (\{.*\})$", re.M)


# ------------------------------------------------------------ helpers

def msg(text, source="agent"):
    role = "assistant" if source == "agent" else "user"
    return {"source": source, "kind": "MessageEvent",
            "llm_message": {"role": role, "content": [{"type": "text", "text": text}]}}


def status_event(value):
    return {"source": "environment", "kind": "ConversationStateUpdateEvent",
            "key": "execution_status", "value": value}


def text_of(e):
    try:
        return e["llm_message"]["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None


def client_env(extra=None):
    env = dict(os.environ)
    env.pop("SESSION_API_KEY", None)
    env.update(extra or {})
    return env


def parley(*args, stdin=None, env=None, timeout=T):
    """Run `$PARLEY args...` to its end -> CompletedProcess (text)."""
    cmd = [os.environ["PARLEY"]] + [str(a) for a in args]
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                              env=client_env(env), timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("%s did not end within %d s; stderr: %s"
                             % (" ".join(cmd), timeout, (e.stderr or b"")[-2000:])) from None


def desc(r):
    return "exit %d; stderr: %s; stdout: %s" % (r.returncode, r.stderr[-1500:], r.stdout[:500])


def ndjson(text, what="stdout"):
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            out.append(json.loads(line))
        except ValueError:
            raise AssertionError("%s line %d is not JSON: %r" % (what, n, line[:300])) from None
    return out


def stats_of(stderr):
    """The --stats line's object (the last one), or fail."""
    m = STATS_RE.findall(stderr)
    check(m, "no `parley tail: stats {...}` line on stderr", stderr[-1500:])
    s = json.loads(m[-1])
    for k in ("requests", "events", "fetched", "frames", "reconnects"):
        check(isinstance(s.get(k), int), "stats without an integer %r" % k, m[-1])
    return s


def same(got, want, what):
    """got == want (lists of dicts), with a readable first difference."""
    if got == want:
        return
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            raise AssertionError("%s: %d lines, wanted %d; first difference at line %d: "
                                 "got %s, wanted %s" % (what, len(got), len(want), i + 1,
                                                        json.dumps(g)[:400], json.dumps(w)[:400]))
    extra = got[len(want):] or want[len(got):]
    raise AssertionError("%s: %d lines, wanted %d; %s starts %s"
                         % (what, len(got), len(want),
                            "the surplus" if len(got) > len(want) else "the missing part",
                            json.dumps(extra[0])[:400]))


class Proc:
    """`$PARLEY args...` in the background; stdout lines collected by a thread
    (wait_lines() waits on a condition the reader signals, no polling)."""

    def __init__(self, *args, env=None):
        self.cmd = [os.environ["PARLEY"]] + [str(a) for a in args]
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.err,
                                  stdin=subprocess.DEVNULL, env=client_env(env))
        self.lines = []
        self.eof = False
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.p.stdout:
            with self.cond:
                self.lines.append(raw.decode("utf-8", "replace"))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def count(self):
        with self.cond:
            return len(self.lines)

    def events(self):
        with self.cond:
            text = "".join(self.lines)
        return ndjson(text, " ".join(self.cmd[1:3]) + " stdout")

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")

    def wait(self, timeout=T):
        """-> exit status; fail (and kill) if it does not end in time."""
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("%s did not end within %d s; stderr: %s"
                                 % (" ".join(self.cmd), timeout, self.stderr()[-2000:])) from None
        self.reader.join(T)
        return rc

    def term(self, timeout=T):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def wait_lines(self, n, what, timeout=T):
        """Until stdout has n lines; fail if tail ends first or time runs out."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.lines) < n:
                if self.eof:
                    self.p.wait(T)
                    raise AssertionError("%s: tail ended (exit %s) with %d of %d lines; stderr: %s"
                                         % (what, self.p.returncode, len(self.lines), n,
                                            self.stderr()[-1500:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: %d of %d lines from tail after %d s; stderr: %s"
                                         % (what, len(self.lines), n, timeout,
                                            self.stderr()[-1500:]))
                self.cond.wait(left)


class Rest:
    """Keep-alive REST calls (http or https) for the fixture side."""

    def __init__(self, port, key=None, ctx=None):
        self.port, self.key, self.ctx = port, key, ctx
        self.local = threading.local()

    def conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            if self.ctx is not None:
                c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=T)
            else:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=T)
            self.local.c = c
        return c

    def call(self, method, path, body=None):
        h = {"Content-Type": "application/json"}
        if self.key:
            h["X-Session-API-Key"] = self.key
        data = json.dumps(body) if body is not None else None
        for attempt in (0, 1):
            c = self.conn()
            try:
                c.request(method, path, body=data, headers=h)
                r = c.getresponse()
                raw = r.read()
                break
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                c.close()
                self.local.c = None
                if attempt:
                    raise
        return r.status, (json.loads(raw) if raw else None)

    def conversation(self, body=None):
        st, b = self.call("POST", "/api/conversations", dict(NO_STUCK, **(body or {})))
        check(st == 201, "POST /api/conversations", st, b)
        return b["id"]

    def append(self, cid, events, want=201):
        st, b = self.call("POST", "/api/conversations/%s/events/append" % cid, events)
        check(st == want, "append: want %d" % want, st, b)
        return b

    def info(self, cid):
        st, b = self.call("GET", "/api/conversations/%s" % cid)
        check(st == 200, "GET conversation", st, b)
        return b

    def log(self, cid):
        out, page = [], None
        while True:
            q = "?limit=100" + ("&page_id=" + page if page else "")
            st, b = self.call("GET", "/api/conversations/%s/events/search%s" % (cid, q))
            check(st == 200, "search", st, b)
            out += b["items"]
            page = b.get("next_page_id")
            if not page:
                return out


def build(rest, cid, n, threads=4, batch=100, prefix="e"):
    """Append n agent messages in arrays of `batch`, from `threads` threads."""
    batches = [(i, min(batch, n - i)) for i in range(0, n, batch)]
    errors = []

    def work(part):
        try:
            for start, size in part:
                rest.append(cid, [msg("%s%d" % (prefix, start + j)) for j in range(size)])
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(batches[k::threads],)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def read_cache(path):
    with open(path, encoding="utf-8") as f:
        return ndjson(f.read(), path)


# ------------------------------------------------------------ (a) cost and resume

def t_cost_and_resume(srv, tmp):
    rest = Rest(srv.port)
    url = "http://127.0.0.1:%d" % srv.port
    cid = rest.conversation()
    t0 = time.monotonic()
    N = 100000
    build(rest, cid, N)
    log = rest.log(cid)
    check(len(log) == N, "the fixture has %d events" % len(log))
    print("   built %d events in %.1f s" % (N, time.monotonic() - t0), flush=True)
    cache = os.path.join(tmp, "copy.ndjson")

    # without a cache, the last N (<= 100) cost a count, a page newest first,
    # a count, and the page from the last one: never the history
    for n in (10, 100):
        r = parley("tail", url, cid, "--json", "--stats", "--last", str(n), timeout=T)
        check(r.returncode == 0, "tail --last %d" % n, desc(r))
        same(ndjson(r.stdout), log[-n:], "tail --last %d of %d: stdout" % (n, N))
        s = stats_of(r.stderr)
        check(s["requests"] <= 4, "tail --last %d: %d requests" % (n, s["requests"]), s)

    # the first sync: everything is new, so everything is printed
    r = parley("tail", url, cid, "--cache", cache, "--json", "--stats", timeout=2 * T)
    check(r.returncode == 0, "tail --cache (first sync)", desc(r))
    same(ndjson(r.stdout), log, "tail --cache, first sync: stdout vs the log")
    same(read_cache(cache), log, "tail --cache, first sync: the cache file vs the log")
    s = stats_of(r.stderr)
    check(s["events"] == N, "first sync: stats events", s)
    check(s["requests"] <= math.ceil(N / 100) + 2,
          "first sync: %d requests for %d events (<= ceil(k/100)+2)" % (s["requests"], N), s)
    check(not [f for f in os.listdir(tmp) if f != "copy.ndjson"],
          "files left next to the cache", os.listdir(tmp))

    def resume(k, extra=(), expect_from=None, what=None):
        nonlocal log
        if k:
            build(rest, cid, k, threads=1, prefix="k%d-" % k)
        log = rest.log(cid)
        r = parley("tail", url, cid, "--cache", cache, "--json", "--stats", *extra)
        what = what or "k=%d" % k
        check(r.returncode == 0, "tail --cache, %s" % what, desc(r))
        want = log[len(log) - k:] if expect_from is None else log[expect_from:]
        same(ndjson(r.stdout), want, "tail --cache, %s: stdout" % what)
        same(read_cache(cache), log, "tail --cache, %s: the cache file" % what)
        s = stats_of(r.stderr)
        limit = math.ceil(k / 100) + 2
        check(s["requests"] <= limit,
              "%s: %d REST requests, the contract allows ceil(%d/100)+2 = %d"
              % (what, s["requests"], k, limit), s)
        check(s["events"] == len(log),
              "%s: stats events %d, log %d" % (what, s["events"], len(log)), s)
        check(s["fetched"] >= k, "%s: stats fetched < k" % what, s)
        print("   %s: %d lines, stats %s" % (what, len(want), json.dumps(s)), flush=True)

    resume(250)
    check(len(log) == N + 250, "log length after k=250", len(log))
    resume(1)
    resume(0)
    # --last over the whole copy, plus what is new
    resume(0, ("--last", "3"), expect_from=len(log) - 3, what="k=0 --last 3")
    resume(7, ("--last", "3"), expect_from=len(log), what="k=7 --last 3")  # the 7 new
    print("ok: (a) cost and resume: 100,000 events cached, then k=250/1/0 new "
          "within ceil(k/100)+2 requests", flush=True)


# ------------------------------------------------------------ (b) --last

def t_last(srv, tmp):
    rest = Rest(srv.port)
    url = "http://127.0.0.1:%d" % srv.port
    empty = rest.conversation()
    r = parley("tail", url, empty, "--json")
    check(r.returncode == 0 and r.stdout == "", "tail of an empty conversation", desc(r))
    r = parley("tail", url, empty, "--json", "--from-start")
    check(r.returncode == 0 and r.stdout == "", "tail --from-start of an empty conversation",
          desc(r))

    cid = rest.conversation()
    build(rest, cid, 37, threads=1, batch=7, prefix="last")
    log = rest.log(cid)
    for args, want, what in [((), log[-10:], "default (last 10)"),
                             (("--last", "5"), log[-5:], "--last 5"),
                             (("--last", "1"), log[-1:], "--last 1"),
                             (("--last", "0"), [], "--last 0"),
                             (("--last", "37"), log, "--last 37"),
                             (("--last", "1000"), log, "--last 1000"),
                             (("--from-start",), log, "--from-start")]:
        r = parley("tail", url, cid, "--json", *args)
        check(r.returncode == 0, "tail %s" % what, desc(r))
        same(ndjson(r.stdout), want, "tail --json %s" % what)
    # a conversation longer than a page: the last 10 still
    build(rest, cid, 250, threads=1, prefix="more")
    log = rest.log(cid)
    r = parley("tail", url, cid, "--json", "--stats")
    check(r.returncode == 0, "tail (287 events)", desc(r))
    same(ndjson(r.stdout), log[-10:], "tail --json of 287 events (last 10)")
    r = parley("tail", url, cid, "--json", "--last", "150")
    check(r.returncode == 0, "tail --last 150", desc(r))
    same(ndjson(r.stdout), log[-150:], "tail --json --last 150 of 287 events")
    # the plain format: something for each event, exit 0, nothing on stderr
    r = parley("tail", url, cid)
    check(r.returncode == 0 and r.stdout.strip() and not r.stderr.strip(), "tail (plain)", desc(r))
    check(text_of(log[-1]) in r.stdout, "plain tail does not show the last message's text",
          text_of(log[-1]), r.stdout[-500:])
    print("ok: (b) --last N, the default last 10, --from-start, empty, plain", flush=True)


# ------------------------------------------------------------ (c) TLS

def t_tls(tmp):
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       capture_output=True, timeout=T)
    check(r.returncode == 0, "openssl req failed", r.stderr.decode(errors="replace"))
    other_cert, other_key = os.path.join(tmp, "other.pem"), os.path.join(tmp, "otherkey.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", other_key, "-out",
                        other_cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       capture_output=True, timeout=T)
    check(r.returncode == 0, "openssl req failed", r.stderr.decode(errors="replace"))
    ctx = ssl.create_default_context(cafile=cert)
    with Server(api_key=KEY, args=("--tls-cert", cert, "--tls-key", key)) as srv:
        check(srv.scheme == "https", "the TLS server did not announce https://")
        rest = Rest(srv.port, KEY, ctx)
        cid = rest.conversation()
        build(rest, cid, 130, threads=1, batch=13, prefix="tls")
        log = rest.log(cid)
        url = "https://127.0.0.1:%d" % srv.port

        r = parley("tail", url, cid, "--json", "--from-start", "--ca-file", cert, "--api-key", KEY)
        check(r.returncode == 0, "tail https:// --ca-file", desc(r))
        same(ndjson(r.stdout), log, "tail https:// --ca-file --from-start")
        r = parley("tail", url, cid, "--json", "--from-start", "--ca-file", cert,
                   env={"SESSION_API_KEY": KEY})
        check(r.returncode == 0, "tail https:// with SESSION_API_KEY", desc(r))
        same(ndjson(r.stdout), log, "tail https:// with SESSION_API_KEY")
        r = parley("tail", url, cid, "--json", "--insecure", "--api-key", KEY)
        check(r.returncode == 0, "tail https:// --insecure", desc(r))
        same(ndjson(r.stdout), log[-10:], "tail https:// --insecure (last 10)")

        # verification failures: the system bundle, another CA
        for extra, what in [((), "the system CA bundle"),
                            (("--ca-file", other_cert), "another CA")]:
            r = parley("tail", url, cid, "--json", "--api-key", KEY, *extra)
            check(r.returncode == 1, "tail https:// with %s: want exit 1" % what, desc(r))
            check(r.stdout == "", "tail https:// with %s printed events" % what, desc(r))
            check(re.search(r"certificate|verif", r.stderr, re.I),
                  "tail https:// with %s: stderr does not mention the certificate" % what, desc(r))
            check(r.stderr.startswith("parley tail: "),
                  "stderr does not start with 'parley tail: '", desc(r))
        # wrong and missing keys
        for extra, what in [(("--api-key", "wrong"), "a wrong --api-key"), ((), "no key")]:
            r = parley("tail", url, cid, "--json", "--ca-file", cert, *extra)
            check(r.returncode == 1, "tail https:// with %s: want exit 1" % what, desc(r))
            check(r.stdout == "", "tail with %s printed events" % what, desc(r))
            r = parley("tail", url, cid, "--json", "--ca-file", cert, "--follow", *extra)
            check(r.returncode == 1, "tail --follow with %s: want exit 1" % what, desc(r))
        r = parley("send", url, cid, "not allowed", "--ca-file", cert, "--api-key", "wrong")
        check(r.returncode == 1, "send with a wrong key: want exit 1", desc(r))
        # the other commands over TLS with the key
        r = parley("send", url, cid, "over tls", "--ca-file", cert, "--api-key", KEY)
        check(r.returncode == 0 and json.loads(r.stdout) == {"success": True},
              "send over TLS", desc(r))
        r = parley("append", url, cid, "-", "--ca-file", cert, "--api-key", KEY,
                   stdin=json.dumps(msg("appended over tls")) + "\n")
        check(r.returncode == 0 and ndjson(r.stdout)[0]["status"] == 201, "append over TLS",
              desc(r))
        r = parley("conversations", url, "--json", "--insecure", "--api-key", KEY)
        ids = [c["id"] for c in ndjson(r.stdout)] if r.returncode == 0 else None
        # a shared store (PARLEY_STORE) lists the test's other servers' too
        check(ids == [cid] or (store() and cid in ids), "conversations over TLS", desc(r))
        r = parley("conversations", url, "--ca-file", cert)
        check(r.returncode == 1, "conversations without the key: want exit 1", desc(r))
        log = rest.log(cid)
        check([text_of(e) for e in log[-2:]] == ["over tls", "appended over tls"],
              "send and append over TLS: the log", log[-2:])

        # --follow --until-done over wss://, with the events coming while it follows
        p = Proc("tail", url, cid, "--json", "--from-start", "--follow", "--until-done",
                 "--ca-file", cert, "--api-key", KEY, "--check-interval", "200ms", "--stats")
        try:
            p.wait_lines(len(log), "tail --follow over TLS, the first %d" % len(log))
            rest.append(cid, status_event("running"))
            build(rest, cid, 40, threads=1, batch=4, prefix="tls-live")
            rest.append(cid, status_event("finished"))
            rc = p.wait()
        finally:
            p.kill()
        check(rc == 0, "tail --follow --until-done over TLS: exit %d" % rc, p.stderr()[-1500:])
        log = rest.log(cid)
        same(p.events(), log, "tail --follow --until-done over TLS")
        s = stats_of(p.stderr())
        check(s["frames"] > 0, "no WebSocket frames over wss:// (did it follow by REST only?)", s)
    print("ok: (c) TLS: --ca-file, SESSION_API_KEY, --insecure, verify failures, keys, "
          "--follow --until-done over wss://", flush=True)


# ------------------------------------------------------------ (d) --until-done

def t_until_done(srv, tmp):
    rest = Rest(srv.port)
    url = "http://127.0.0.1:%d" % srv.port

    # events come while it follows; then running -> finished
    cid = rest.conversation()
    build(rest, cid, 25, threads=1, batch=5, prefix="before")
    p = Proc("tail", url, cid, "--json", "--from-start", "--follow", "--until-done",
             "--check-interval", "200ms", "--stats")
    try:
        p.wait_lines(25, "until-done: the first 25")
        rest.append(cid, status_event("running"))
        build(rest, cid, 300, threads=2, batch=3, prefix="live")
        check(p.p.poll() is None, "tail --until-done exited while running", p.stderr()[-1500:])
        rest.append(cid, status_event("finished"))
        t0 = time.monotonic()
        rc = p.wait()
    finally:
        p.kill()
    check(rc == 0, "tail --follow --until-done: exit %d" % rc, p.stderr()[-1500:])
    log = rest.log(cid)
    same(p.events(), log, "tail --follow --until-done --from-start")
    s = stats_of(p.stderr())
    check(s["events"] == len(log), "until-done: stats events", s, len(log))
    print("   until-done: exit %.2f s after finished, stats %s" % (time.monotonic() - t0,
                                                               json.dumps(s)), flush=True)

    # --last 3 with --follow: the last 3 already there, then everything new
    cid = rest.conversation()
    build(rest, cid, 20, threads=1, batch=10, prefix="l3-")
    base = len(rest.log(cid))
    p = Proc("tail", url, cid, "--json", "--last", "3", "--follow", "--until-done",
             "--check-interval", "200ms")
    try:
        p.wait_lines(3, "--follow --last 3: the first 3")
        rest.append(cid, status_event("running"))
        build(rest, cid, 10, threads=1, batch=1, prefix="l3-live")
        rest.append(cid, status_event("finished"))
        rc = p.wait()
    finally:
        p.kill()
    check(rc == 0, "tail --follow --until-done --last 3: exit %d" % rc, p.stderr()[-1500:])
    log = rest.log(cid)
    same(p.events(), log[base - 3:], "tail --follow --until-done --last 3")

    # finished (or error, stuck) before tail starts: it syncs and exits 0
    for terminal in ("finished", "error", "stuck"):
        cid = rest.conversation()
        build(rest, cid, 120, threads=1, batch=40, prefix=terminal)
        rest.append(cid, status_event("running"))
        st, b = rest.call("POST", "/api/conversations/%s/events/append" % cid,
                          status_event(terminal))
        check(st == 201, "append execution_status %s" % terminal, st, b)
        check(rest.info(cid)["execution_status"] == terminal, "the server's status", rest.info(cid))
        log = rest.log(cid)
        r = parley("tail", url, cid, "--json", "--from-start", "--follow", "--until-done",
                   "--check-interval", "200ms")
        check(r.returncode == 0, "tail --follow --until-done of a %s conversation" % terminal,
              desc(r))
        same(ndjson(r.stdout), log, "tail --until-done of a %s conversation" % terminal)
    print("ok: (d) --follow --until-done (live, --last 3, already finished/error/stuck)",
          flush=True)


# ------------------------------------------------------------ (e) send, append, conversations

def shared_dir():
    d = os.environ.get("PARLEY_SHARED_DIR")
    if d:
        return d
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")


def t_send_append_conversations(srv, tmp):
    rest = Rest(srv.port)
    url = "http://127.0.0.1:%d" % srv.port

    # send, without --run: a user message, the status stays idle
    cid = rest.conversation()
    r = parley("send", url, cid, "hello from send")
    check(r.returncode == 0, "send", desc(r))
    lines = r.stdout.splitlines()
    check(len(lines) == 1 and json.loads(lines[0]) == {"success": True},
          "send prints the server's answer as one line", desc(r))
    log = rest.log(cid)
    check([e["kind"] for e in log] == ["MessageEvent"] and log[0]["source"] == "user"
          and text_of(log[0]) == "hello from send", "send: the log", log)
    check(rest.info(cid)["execution_status"] == "idle", "send without --run started a run",
          rest.info(cid))
    # with --run: running
    r = parley("send", url, cid, "and now run", "--run")
    check(r.returncode == 0, "send --run", desc(r))
    check(json.loads(r.stdout.splitlines()[0]) == {"success": True}, "send --run's answer", desc(r))
    log = rest.log(cid)
    check(any(e["kind"] == "MessageEvent" and text_of(e) == "and now run" for e in log),
          "send --run: no message in the log", log)
    status = rest.info(cid)["execution_status"]
    check(status == "running", "send --run: execution_status %r, wanted running" % status)
    # a text with quotes, newlines and non-ASCII goes through as it is
    odd = 'quote " backslash \\ newline\nand \u00e9\u00e8 \U0001F600'
    r = parley("send", url, cid, odd)
    check(r.returncode == 0, "send of an odd text", desc(r))
    check(any(text_of(e) == odd for e in rest.log(cid)), "send: the odd text came back otherwise",
          rest.log(cid)[-3:])
    # send to an unknown conversation: exit 1, one line on stderr
    r = parley("send", url, str(uuid.uuid4()), "nobody")
    check(r.returncode == 1 and r.stderr.startswith("parley send: "), "send to an unknown id",
          desc(r))
    print("ok: (e) send (with and without --run)", flush=True)

    # append: from a file, with a deferral, a refusal (409) and an invalid event (422)
    with open(os.path.join(shared_dir(), "vectors", "compliance",
                           "a03_interleaved_user_message.json"), encoding="utf-8") as f:
        u1, a1, u2, t1 = [s["append"] for s in json.load(f)["steps"]]
    bad = dict(msg("interleaved while a call is pending"), id="m-bad")
    ok = dict(msg("after the refusals"), id="m-ok")
    lines = [json.dumps(u1), json.dumps(a1), "", json.dumps(u2), json.dumps(bad),
             "   ", json.dumps(t1), json.dumps({"kind": "Frobnicate"}), json.dumps(ok), ""]
    # the verdict each non-blank line should get: (file line number, status)
    want = [(1, 201), (2, 201), (4, 202), (5, 409), (7, 201), (8, 422), (9, 201)]
    path = os.path.join(tmp, "events.ndjson")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))

    def check_append(r, cid, what):
        check(r.returncode == 1, "%s: want exit 1 after a refusal" % what, desc(r))
        got = ndjson(r.stdout, what)
        check([(v.get("line"), v.get("status")) for v in got] == want,
              "%s: verdict lines (line, status), wanted %s" % (what, want), r.stdout)
        check(all(set(v) == {"line", "status", "answer"} for v in got), "%s: verdict keys" % what,
              r.stdout)
        check(got[0]["answer"] == {"events": [{"id": "u1", "index": 0}]}, "%s: answer 1" % what,
              got[0])
        check(got[2]["answer"].get("events") == [{"id": "u2"}], "%s: the deferral's answer" % what,
              got[2])
        check(got[3]["answer"].get("rule") == "interleaved_message", "%s: the 409's answer" % what,
              got[3])
        check("Frobnicate" in got[5]["answer"].get("detail", ""), "%s: the 422's answer" % what,
              got[5])
        log = rest.log(cid)
        check([e["id"] for e in log] == ["u1", "a1", "t1", "u2", "m-ok"],
              "%s: the log after append" % what, [e["id"] for e in log])
        check(got[6]["answer"] == {"events": [{"id": "m-ok", "index": 4}]},
              "%s: last answer" % what, got[6])

    cid = rest.conversation()
    r = parley("append", url, cid, path)
    check_append(r, cid, "append FILE")
    cid = rest.conversation()
    r = parley("append", url, cid, "-", stdin="\n".join(lines))
    check_append(r, cid, "append - (stdin)")
    # all accepted (a retry of a stored event is 201 too): exit 0
    clean = [json.dumps(dict(msg("clean %d" % i), id="c%d" % i)) for i in range(5)]
    clean.append(clean[2])
    r = parley("append", url, cid, "-", stdin="\n".join(clean) + "\n")
    check(r.returncode == 0, "append of accepted events: want exit 0", desc(r))
    got = ndjson(r.stdout)
    check([(v["line"], v["status"]) for v in got] == [(i, 201) for i in range(1, 7)],
          "append of accepted events: verdicts", r.stdout)
    check(got[5]["answer"].get("duplicate") is True, "the retry's answer", got[5])
    check([e["id"] for e in rest.log(cid)][-5:] == ["c%d" % i for i in range(5)],
          "append: the clean events in the log", rest.log(cid))
    # an unreadable file: exit 1 (or 2), nothing appended
    r = parley("append", url, cid, os.path.join(tmp, "missing.ndjson"))
    check(r.returncode in (1, 2) and r.stderr.startswith("parley append: "),
          "append of a missing file", desc(r))
    # a line that is not JSON: a verdict or an error, but never a crash
    r = parley("append", url, cid, "-", stdin='{"kind": oops}\n' + clean[0] + "\n")
    check(r.returncode in (1, 2), "append of a non-JSON line: want exit 1 or 2", desc(r))
    print("ok: (e) append from a file and stdin (201/202/409/422 verdicts, exit 1, "
          "the rest appended; exit 0 when all accepted)", flush=True)

    # conversations: more than one page (search pages by 100 at most)
    ids = {}
    for i in range(105):
        c = rest.conversation({"title": "conv title %03d" % i})
        ids[c] = "conv title %03d" % i
    st, count = rest.call("GET", "/api/conversations/count")
    check(st == 200, "count", st, count)
    all_info = []
    page = None
    while True:
        q = "?limit=100" + ("&page_id=" + page if page else "")
        st, b = rest.call("GET", "/api/conversations/search" + q)
        check(st == 200, "conversations search", st, b)
        all_info += b["items"]
        page = b.get("next_page_id")
        if not page:
            break
    check(len(all_info) == count, "the fixture's conversation count", len(all_info), count)
    r = parley("conversations", url, "--json")
    check(r.returncode == 0, "conversations --json", desc(r))
    got = ndjson(r.stdout)
    check(len(got) == count, "conversations --json: %d lines, %d conversations" % (len(got), count))
    by_id = {c["id"]: c for c in all_info}
    check({c["id"] for c in got} == set(by_id), "conversations --json: other ids")
    for c in got:
        check(c.get("title") == by_id[c["id"]].get("title") and
              c.get("execution_status") == by_id[c["id"]].get("execution_status"),
              "conversations --json: an object differs from search's", c, by_id[c["id"]])
    r = parley("conversations", url)
    check(r.returncode == 0, "conversations", desc(r))
    rows = [line for line in r.stdout.splitlines() if line.strip()]
    check(len(rows) == count, "conversations: %d lines, %d conversations" % (len(rows), count),
          r.stdout[:1000])
    seen = set()
    for line in rows:
        m = re.match(r"^(\S+)\s{2,}(\S+)(?:\s{2,}(.*))?$", line)
        check(m, "conversations: a line that is not `ID  STATUS  TITLE`", line)
        cid_, status, title = m.group(1), m.group(2), (m.group(3) or "").rstrip()
        check(cid_ in by_id, "conversations: unknown id", line)
        check(status == by_id[cid_]["execution_status"], "conversations: status", line, by_id[cid_])
        if cid_ in ids:
            check(title == ids[cid_], "conversations: title", line, ids[cid_])
        seen.add(cid_)
    check(seen == set(by_id), "conversations: not every conversation listed")
    print("ok: (e) conversations (plain and --json, %d conversations over 2 pages)" % count,
          flush=True)


# ------------------------------------------------------------ (f) 4004 and usage

def t_unknown_and_usage(srv, tmp):
    url = "http://127.0.0.1:%d" % srv.port
    rest = Rest(srv.port)
    unknown = str(uuid.uuid4())
    for args in (("--follow",), ("--follow", "--json", "--from-start"), ()):
        t0 = time.monotonic()
        r = parley("tail", url, unknown, *args, timeout=T)
        took = time.monotonic() - t0
        check(r.returncode == 1, "tail %s of an unknown conversation: want exit 1"
              % " ".join(args), desc(r))
        check(took < 10, "tail %s of an unknown conversation took %.1f s" % (" ".join(args), took))
        check(r.stdout == "" and r.stderr.startswith("parley tail: ") and
              len(r.stderr.splitlines()) == 1,
              "tail of an unknown conversation: one line on stderr", desc(r))
    # nothing listening: exit 1 (a port that was just free)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    cid = rest.conversation()
    r = parley("tail", "http://127.0.0.1:%d" % dead, cid)
    check(r.returncode == 1 and r.stderr.startswith("parley tail: "),
          "tail of a closed port", desc(r))

    for cmd in ("tail", "send", "append", "conversations"):
        r = parley(cmd, "--help")
        check(r.returncode == 0 and r.stdout.strip(), "%s --help" % cmd, desc(r))
    for args in (("tail",), ("tail", url), ("tail", url, cid, "--bogus"),
                 ("tail", url, cid, "--last", "x"), ("tail", url, cid, "--check-interval", "soon"),
                 ("tail", "ftp://127.0.0.1:1", cid), ("send", url, cid),
                 ("append", url, cid), ("conversations",)):
        r = parley(*args)
        check(r.returncode == 2, "parley %s: want exit 2 (usage)" % " ".join(args), desc(r))
        check(r.stderr.startswith("parley %s: " % args[0]), "usage error's stderr", desc(r))
    print("ok: (f) unknown conversation exit 1 quickly, a closed port, usage exit 2, --help",
          flush=True)


# ------------------------------------------------ (g) cache + follow, signals, divergence

def t_cache_follow(srv, tmp):
    rest = Rest(srv.port)
    url = "http://127.0.0.1:%d" % srv.port
    cid = rest.conversation()
    build(rest, cid, 230, threads=1, batch=23, prefix="cf")
    cache = os.path.join(tmp, "follow.ndjson")
    r = parley("tail", url, cid, "--cache", cache, "--json")
    check(r.returncode == 0, "tail --cache (first)", desc(r))
    # --follow with a cache: only the new ones are printed; SIGTERM writes the copy back
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        before = len(rest.log(cid))
        p = Proc("tail", url, cid, "--cache", cache, "--json", "--follow",
                 "--check-interval", "200ms", "--stats")
        try:
            build(rest, cid, 40, threads=1, batch=4, prefix="cf-%s" % name)
            p.wait_lines(40, "--cache --follow: the 40 new events (%s)" % name)
            p.p.send_signal(sig)
            rc = p.wait()
        finally:
            p.kill()
        check(rc == 0, "tail --cache --follow after %s: exit %d" % (name, rc), p.stderr()[-1500:])
        log = rest.log(cid)
        same(p.events(), log[before:], "tail --cache --follow (%s): the new events" % name)
        same(read_cache(cache), log, "tail --cache --follow (%s): the cache written at exit" % name)
        s = stats_of(p.stderr())
        check(s["events"] == len(log), "--cache --follow: stats events", s)
    # a cache of another conversation does not match this log: exit 1 (divergence),
    # and nothing of the other conversation is printed as this one's
    other = rest.conversation()
    build(rest, other, 30, threads=1, batch=30, prefix="other")
    r = parley("tail", url, other, "--cache", cache, "--json")
    check(r.returncode == 1, "tail --cache with another conversation's copy: want exit 1", desc(r))
    check(r.stderr.startswith("parley tail: "), "divergence: stderr", desc(r))
    # a cache that is not NDJSON: an error, not a crash
    bad = os.path.join(tmp, "bad.ndjson")
    with open(bad, "w") as f:
        f.write('{"id": "x", "kind": oops}\n')
    r = parley("tail", url, cid, "--cache", bad, "--json")
    check(r.returncode in (1, 2) and r.stderr.startswith("parley tail: "),
          "tail --cache of a file that is not NDJSON", desc(r))
    print("ok: (g) --cache with --follow (SIGTERM and SIGINT write it back), another "
          "conversation's cache is exit 1, a bad cache file", flush=True)


# ------------------------------------------------------------ main

def main():
    check(os.environ.get("PARLEY"), "PARLEY must point at the parley binary (ctest sets it)")
    groups = sys.argv[1:] or list("abcdefg")
    tmp = tempfile.mkdtemp(prefix="parley-client.")
    try:
        needs_server = [g for g in groups if g != "c"]
        if needs_server:
            with Server(workers=2) as srv:
                for g, fn in [("a", t_cost_and_resume), ("b", t_last), ("d", t_until_done),
                              ("e", t_send_append_conversations), ("f", t_unknown_and_usage),
                              ("g", t_cache_follow)]:
                    if g in groups:
                        t0 = time.monotonic()
                        d = os.path.join(tmp, g)
                        os.mkdir(d)
                        fn(srv, d)
                        check(srv.died() is None, "serve died during (%s)" % g, srv.died())
                        print("   (%s) took %.1f s" % (g, time.monotonic() - t0), flush=True)
        if "c" in groups:
            t0 = time.monotonic()
            d = os.path.join(tmp, "c")
            os.mkdir(d)
            t_tls(d)
            print("   (c) took %.1f s" % (time.monotonic() - t0), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("client_test: ok")


if __name__ == "__main__":
    main()
