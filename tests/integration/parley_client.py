"""parley_client.py - a real `parley serve` in a temp dir, and a small HTTP
client for it. Standard library only.

    with Server() as srv:              # starts $PARLEY serve on 127.0.0.1:0
        c = srv.client()               # Client(base URL, api key)
        status, headers, body = c.request("GET", "/alive")
    # leaving the block sends SIGTERM and checks exit status 0

Nothing here sleeps to synchronize: the server announces its port on its
first stdout line, and waits are conditions polled against a deadline that
fails the test instead of hanging it.
"""

import http.client
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager

START_TIMEOUT = 60  # seconds for `listening on ...` (ASan builds are slow)
STOP_TIMEOUT = 60   # seconds for a clean exit after SIGTERM
HTTP_TIMEOUT = 60   # seconds for one request
# PARLEY_DATA_PREFIX=local: every server keeps its conversations in the
# local store, a directory each (--data local:DIR), instead of the pool's
# shared segments (the default for a new directory): the suites on both.
DATA_PREFIX = os.environ.get("PARLEY_DATA_PREFIX", "")


def store():
    """PARLEY_STORE=nats://...: every server keeps its conversations on that
    cluster (`nats_cluster.py run` passes PARLEY_NATS_URLS, which the NATS
    variants of the suites give here; a test that starts its own cluster
    sets it). Read when a server starts, not at import."""
    return os.environ.get("PARLEY_STORE")


class TestFailure(Exception):
    pass


def check(cond, msg, *details):
    """Fail with msg (and the details, repr'd) unless cond."""
    if not cond:
        if details:
            msg += " | " + " | ".join(
                d if isinstance(d, str) else repr(d) for d in details)
        raise TestFailure(msg)


class Response:
    """status, headers (lower-cased names), body (parsed JSON, or None), raw bytes."""

    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers
        self.raw = raw
        try:
            self.body = json.loads(raw.decode("utf-8")) if raw else None
        except (ValueError, UnicodeDecodeError):
            self.body = None

    def __iter__(self):  # status, headers, body = client.request(...)
        return iter((self.status, self.headers, self.body))

    def __repr__(self):
        return "HTTP %d %s" % (self.status, self.raw[:600].decode("utf-8", "replace"))


class Client:
    """One keep-alive connection to the server; reconnects if it is closed."""

    def __init__(self, host, port, api_key=None):
        self.host, self.port, self.api_key = host, port, api_key
        self.conn = None

    def _connect(self):
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=HTTP_TIMEOUT)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def send(self, method, path, body=None, headers=None, raw=None):
        """Send a request without reading its answer (see receive())."""
        hdrs = {}
        if self.api_key is not None:
            hdrs["X-Session-API-Key"] = self.api_key
        data = raw
        if body is not None:
            data = json.dumps(body).encode("utf-8")
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        hdrs = {k: v for k, v in hdrs.items() if v is not None}
        conn = self.conn or self._connect()
        conn.request(method, path, body=data, headers=hdrs)

    def receive(self):
        r = self.conn.getresponse()
        raw = r.read()
        headers = {k.lower(): v for k, v in r.getheaders()}
        if r.will_close:
            self.close()
        return Response(r.status, headers, raw)

    def request(self, method, path, body=None, headers=None, raw=None):
        """-> Response (unpacks as status, headers, body). body: JSON to send;
        raw: bytes to send as they are. Headers given as None are left out."""
        try:
            self.send(method, path, body, headers, raw)
            return self.receive()
        except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
            # the server closed an idle keep-alive connection: once more, fresh
            self.close()
            self.send(method, path, body, headers, raw)
            return self.receive()

    # shorthands
    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def expect(self, method, path, status, body=None, **kw):
        """request(), failing unless the status is `status`; -> the parsed body."""
        r = self.request(method, path, body=body, **kw)
        check(r.status == status, "%s %s: want %d" % (method, path, status), r)
        return r.body


LIVE = []  # the servers running now (to say which died when a test fails)


def failure_text(log):
    """What of a server's stderr a failure shows: a sanitizer's report whole
    (its first stack says who made the bad access), else the last 3000
    characters."""
    for mark in ("==ERROR: ", "WARNING: ThreadSanitizer", "runtime error: "):
        at = log.find(mark)
        if at >= 0:
            return log[max(0, log.rfind("\n", 0, at) + 1):][:30000]
    return log[-3000:]


class Server:
    """`$PARLEY serve` on 127.0.0.1:0 with its own data dir (or a given one)."""

    def __init__(self, data=None, api_key=None, env=None, args=(), workers=2, wrap=()):
        """wrap: a command the server runs under (e.g. prlimit and its options)."""
        self.own_data = data is None
        self.wrap = list(wrap)
        self.data = data or tempfile.mkdtemp(prefix="parley-api.")
        self.api_key = api_key
        self.env = env
        self.args = list(args)
        self.workers = workers
        self.proc = None
        self.port = None
        self.clients = []

    def start(self):
        binary = os.environ.get("PARLEY")
        check(binary, "PARLEY must point at the parley binary (ctest sets it)")
        cmd = self.wrap + [binary, "serve", "--data", DATA_PREFIX + self.data,
               "--listen", "127.0.0.1:0",
               "--workers", str(self.workers), "--log-level", "warn"] + self.args
        if store():  # the conversations on a NATS cluster; --data keeps the workspaces
            cmd += ["--store", store()]
        if self.api_key is not None:
            cmd += ["--api-key", self.api_key]
        env = dict(os.environ)
        env.pop("SESSION_API_KEY", None)
        env.update(self.env or {})
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT)
        line = self.proc.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
        # https:// when serving with --tls-cert/--tls-key (self.scheme says which)
        self.scheme = "https" if line.startswith("listening on https://") else "http"
        prefix = "listening on %s://127.0.0.1:" % self.scheme
        if not line.startswith(prefix):
            self.proc.kill()
            self.proc.wait()
            raise TestFailure("serve did not announce itself: %r; stderr: %s"
                              % (line, self._stderr_text()))
        self.port = int(line[len(prefix):])
        LIVE.append(self)
        return self

    def _stderr_text(self, tail=3000):
        self.stderr.seek(0)
        text = self.stderr.read().decode("utf-8", "replace")
        return text[-tail:] if tail else text

    def client(self, api_key="default"):
        c = Client("127.0.0.1", self.port, self.api_key if api_key == "default" else api_key)
        self.clients.append(c)
        return c

    def terminate(self):
        """Send SIGTERM and return; stop() then waits for the exit."""
        self.proc.send_signal(signal.SIGTERM)
        self.signalled = True

    def loop_requests(self):
        """How often the server waited for its NATS cluster on a loop thread
        (parley_nats_loop_requests_total), or None if /metrics does not say."""
        return self.metric("parley_nats_loop_requests_total")

    def metric(self, name):
        """The value of an unlabelled metric of /metrics (None: not there)."""
        try:
            if self.scheme == "https":
                import ssl
                conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT,
                                                   context=ssl._create_unverified_context())
            else:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT)
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode("utf-8", "replace")
            conn.close()
        except (OSError, http.client.HTTPException):
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
        return None

    def stop(self):
        """SIGTERM (unless terminate() sent it), then check a clean exit (status
        0); on a NATS cluster, also that no loop thread ever waited for it."""
        for c in self.clients:
            c.close()
        self.clients = []
        if self.proc is None:
            return
        waits = self.loop_requests() if store() and self.proc.poll() is None else None
        proc, self.proc = self.proc, None
        LIVE.remove(self)
        if not getattr(self, "signalled", False):
            proc.send_signal(signal.SIGTERM)
        self.signalled = False
        try:
            rc = proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise TestFailure("serve did not stop within %d s of SIGTERM" % STOP_TIMEOUT)
        proc.stdout.close()
        self.log_text = self._stderr_text(0)  # all it logged, for tests that read it
        check(rc == 0, "serve exited %d after SIGTERM, wanted 0; stderr: %s"
              % (rc, failure_text(self.log_text)))
        self.stderr.close()
        check(not waits, "a loop thread waited for the NATS cluster %s times (issue 22); "
              "stderr: %s" % (waits, self.log_text[-3000:]))

    def restart(self):
        """SIGTERM (exit 0 checked), then serve the same data directory again."""
        self.stop()
        return self.start()

    def kill(self):
        if self.proc is not None:
            LIVE.remove(self)
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self.proc = None

    def cleanup(self):
        self.kill()
        if self.own_data:
            shutil.rmtree(self.data, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.stop()
            elif self.died():  # a test failing because the server died says so
                sys.stderr.write("parley_client: %s\n" % self.died())
            elif self.log_tail():  # or what it logged before the failure
                sys.stderr.write("parley_client: the server logged:\n%s\n" % self.log_tail())
        finally:
            self.cleanup()

    def log_tail(self, tail=3000):
        """What it logged so far (warnings and errors), for a failing test's
        report: a test that fails while the server runs says what it saw."""
        try:
            text = self._stderr_text(tail).strip()
        except (AttributeError, ValueError, OSError):
            return ""
        return text

    def died(self):
        """None while running; else why it stopped, with its stderr."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return "serve exited %d; stderr: %s" % (self.proc.returncode, self._stderr_text())


class Api:
    """REST calls for the WebSocket tests, one connection per call (http, or
    https with an ssl context): status and decoded body, no retries."""

    def __init__(self, port, key=None, ctx=None, body=None):
        self.port, self.key, self.ctx = port, key, ctx
        self.create = {} if body is None else body  # POST /api/conversations's body

    def call(self, method, path, body=None):
        if self.ctx is not None:
            c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                            timeout=HTTP_TIMEOUT)
        else:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT)
        h = {"Content-Type": "application/json"}
        if self.key:
            h["X-Session-API-Key"] = self.key
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, (json.loads(raw) if raw else None)

    def conversation(self):
        st, b = self.call("POST", "/api/conversations", self.create)
        check(st == 201, "POST /api/conversations", st, b)
        return b["id"]

    def append(self, cid, events):
        st, b = self.call("POST", "/api/conversations/%s/events/append" % cid, events)
        check(st == 201, "append", st, b)
        return b["events"]

    def log(self, cid):
        """The whole log, paged by the inclusive cursor."""
        out, page = [], None
        while True:
            q = "?limit=100" + ("&page_id=" + page if page else "")
            st, b = self.call("GET", "/api/conversations/%s/events/search%s" % (cid, q))
            check(st == 200, "search", st, b)
            out += b["items"]
            page = b.get("next_page_id")
            if not page:
                return out


def wait_for(what, cond, timeout=30):
    """Poll cond() until it returns something true; fail after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TestFailure("timed out after %d s waiting for %s" % (timeout, what))
        time.sleep(0.02)  # a poll interval, so as not to load the server we wait on


# ------------------------------------------------------------------ runner ---

RESULTS = {"ok": 0, "fail": []}
# Server bugs a suite found (test name -> the bug as first seen): such a test
# checks the correct behaviour, and its FAIL line quotes the bug while it fails.
SERVER_BUGS = {}


def run(name, fn, *args):
    """Run one check: `ok <name>` or `FAIL <name>: why`; the run goes on.
    With $PARLEY_ONLY (names, comma-separated) set, only those run."""
    only = os.environ.get("PARLEY_ONLY")
    if only and name not in only.split(","):
        return
    t0 = time.monotonic()
    caller = sys.modules["__main__"].__file__
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
        tag = " [known server bug: %s]" % SERVER_BUGS[name] if name in SERVER_BUGS else ""
        if isinstance(e, TestFailure):
            why = str(e)
            where = traceback.extract_tb(e.__traceback__)
            frame = [f for f in where if f.filename == caller][-1:]
            if frame:
                why += " (%s:%d)" % (os.path.basename(frame[0].filename), frame[0].lineno)
        else:
            why = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        for srv in LIVE:
            if srv.died():
                why += "\n  SERVER DIED: " + srv.died()
            elif srv.log_tail():
                why += "\n  the server logged:\n" + srv.log_tail()
        print("FAIL %s%s: %s" % (name, tag, why), flush=True)
        RESULTS["fail"].append(name)
        return
    print("ok %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
    RESULTS["ok"] += 1


@contextmanager
def serving(name, **kw):
    """A server for a group of tests; stopping it cleanly (SIGTERM, exit 0)
    is a test of its own, named name."""
    srv = Server(**kw).start()
    try:
        yield srv
        run(name, srv.stop)
    finally:
        srv.cleanup()


def summary(t0):
    """Print the totals since t0; the exit status (0: all passed)."""
    took = time.monotonic() - t0
    if RESULTS["fail"]:
        print("%d ok, %d FAILED (%s) in %.1fs" % (RESULTS["ok"], len(RESULTS["fail"]),
                                                 ", ".join(RESULTS["fail"]), took))
        return 1
    print("%d ok in %.1fs" % (RESULTS["ok"], took))
    return 0
