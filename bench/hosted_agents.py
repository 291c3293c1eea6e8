#!/usr/bin/python3
"""hosted_agents.py - a benchmark of hosted ACP agents in `parley serve`.

For each N of --n, each of --runs times on a fresh server (`parley serve`
on 127.0.0.1, port 0, a scratch directory holding its data and a copy of
the binary, so that a rebuild meanwhile cannot fail the agents' exec; the
demo agent registered as `demo` and made the default: `parley demo-agent
--stamp`):

  1. create N conversations hosting the demo agent (POST /api/conversations
     with an initial message: one agent process each, which answers it with
     a first turn, the warm-up);
  2. subscribe one WebSocket per conversation (/sockets/events/{id},
     envelope=index, resend_mode=all; every subscriber checks that its
     indexes are dense) and wait until every conversation is finished;
  3. run --turns scripted turns in every conversation at once: post a user
     message with "run": true (HTTP keep-alive, a pool of connections), wait
     for its execution_status `finished` in the stream, post the next;
  4. read the server's RSS and count its agent processes, then stop the
     server with SIGTERM (exit status 0 is checked) and check that every
     agent process it started is gone.

Reported per N, medians over the runs:

  events/s    events committed across all conversations during step 3
              (parley_events_appended_total of /metrics) / its wall time
  latency     from the agent writing a message chunk (CLOCK_REALTIME, the
              " [t=NS]" that --stamp puts in each chunk) to the subscriber
              taking the frame of the MessageEvent that holds it off its
              socket (time.time_ns() after recv): p50, p99 over every stamp
              of step 3. The client is Python on the same 2 cores, so this
              includes its own scheduling. parley makes one MessageEvent of
              a turn's consecutive chunks when the turn ends, so the delay
              between the chunks is in it (none with --delay-ms 0)
  turn        from posting a message to its `finished` frame: p50, p99
  RSS/conv    (server VmRSS after step 3 - VmRSS before step 1) / N, with
              each conversation's subscriber still connected; the agent
              processes are separate and not in it. It grows with --turns:
              an open log keeps an index entry per event in memory
  agents      agent processes alive (children of the server) after step 3
  server CPU  the server's CPU time during step 3 / its wall time, in cores
              (stderr also shows the agents' and this client's)

Progress goes to stderr, the table to stdout. Network: 127.0.0.1 only.
Standard library only; run with /usr/bin/python3 from anywhere.
"""
import argparse
import collections
import http.client
import json
import os
import re
import resource
import selectors
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from ws_raw import frame, handshake  # noqa: E402  (the tests' raw WebSocket client)

STAMP = re.compile(r" \[t=(\d+)\]")
T0 = time.monotonic()


class BenchError(Exception):
    pass


def progress(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


def pct(xs, p):
    """The p-th percentile (nearest rank) of a sorted list; None if empty."""
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))]


def vmrss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise BenchError("no VmRSS for pid %d" % pid)


def cpu_s(pid):
    """User + system CPU seconds of a process (0 if it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return 0.0
    f = st[st.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def busy_s():
    """CPU seconds the whole machine has been busy (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def children(ppid):
    """{pid: cmdline} of the live processes whose parent is ppid."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            # pid (comm) state ppid ...: comm may hold spaces and parens
            if int(st[st.rindex(")") + 2:].split()[1]) != ppid:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                out[int(d)] = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def alive(pid, cmdline):
    """Whether pid is still the process with this command line (and not a zombie)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            now = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        return now == cmdline and st[st.rindex(")") + 2] != "Z"
    except (OSError, ValueError):
        return False


# ------------------------------------------------------------- server ---

class Server:
    """`parley serve` in its own session (a Ctrl-C reaches only us: we stop
    it), on 127.0.0.1:0, a scratch directory; its log in that directory."""

    def __init__(self, a, tmp):
        self.tmp = tmp
        # a copy of the binary: a rebuild during the run (the link rewrites
        # it in place) cannot make the agents' exec fail or change what runs
        binary = os.path.join(tmp, "parley")
        shutil.copy2(a.parley, binary)
        agent = "demo=%s demo-agent --stamp %s" % (shlex.quote(binary), a.agent_args)
        self.cmd = [binary, "serve", "--data", os.path.join(tmp, "data"),
                    "--listen", "127.0.0.1:0", "--log-level", "warn",
                    "--durability", a.durability, "--agent", agent.strip(),
                    "--default-agent", "demo"]
        if a.workers:
            self.cmd += ["--workers", str(a.workers)]
        self.cmd += a.serve_arg
        self.log_path = os.path.join(tmp, "serve.log")
        self.log = open(self.log_path, "w+b")
        self.proc = None
        self.agents = {}  # every agent process seen: pid -> cmdline

    def start(self):
        env = dict(os.environ)
        env.pop("SESSION_API_KEY", None)  # no key: none is needed on 127.0.0.1 here
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                     start_new_session=True)
        self.pid = self.proc.pid
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(60)
        sel.close()
        line = self.proc.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line)
        if not m:
            raise BenchError("parley serve did not start (%r): %s" % (line, self.log_tail()))
        self.port = int(m.group(1))

    def log_tail(self, n=3000):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]

    def check(self):
        if self.proc.poll() is not None:
            raise BenchError("parley serve exited %d; its log: %s"
                             % (self.proc.returncode, self.log_tail()))

    def agent_pids(self):
        kids = {p: c for p, c in children(self.pid).items() if "demo-agent" in c}
        self.agents.update(kids)
        return kids

    def stop(self, timeout=120):
        """SIGTERM, wait; the exit status (None if it had to be killed)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.agent_pids()
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.proc.stdout.close()
        return rc

    def leftovers(self, wait=10):
        """Agent processes still alive after the server exited (waiting up to
        `wait` s for them); those are killed by their pid."""
        deadline = time.monotonic() + wait
        while True:
            left = [p for p, c in self.agents.items() if alive(p, c)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        return left


def metrics(port, *names):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read().decode()
    finally:
        c.close()
    if r.status != 200:
        raise BenchError("GET /metrics: %d" % r.status)
    out = []
    for name in names:
        m = re.search(r"^%s ([0-9.e+-]+)$" % re.escape(name), body, re.M)
        if not m:
            raise BenchError("/metrics has no %s" % name)
        out.append(float(m.group(1)))
    return out


# ---------------------------------------------------- the event loop ---

class Conv:
    def __init__(self, cid):
        self.id = cid
        self.sock = None
        self.buf = b""
        self.frag = None      # a fragmented message being gathered
        self.index = -1       # the last log index received
        self.status = None    # the last execution_status received
        self.turn = 0         # turns posted in the measured phase
        self.expect = None    # the text of the user message of the turn under way
        self.seen = False     # that message is in the stream
        self.posted_at = 0.0
        self.done = False
        self.failed = None
        self.error = None     # the last error event's code and detail


class HttpConn:
    """A keep-alive HTTP connection in the loop: one request in flight."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.conv = None


class Loop:
    def __init__(self, srv, convs, a):
        self.srv, self.convs, self.a = srv, convs, a
        self.sel = selectors.DefaultSelector()
        self.http = []
        self.queue = collections.deque()  # conversations waiting to post
        self.measuring = False
        self.lat = []         # ns, per stamp
        self.turns = []       # s, per turn
        self.frames = 0
        self.last_finish = 0.0
        self.running = 0      # conversations not done
        self.failed = 0       # conversations that went to error, stuck or paused

    def close(self):
        for c in self.convs:
            if c.sock is not None:
                try:
                    c.sock.close()
                except OSError:
                    pass
                c.sock = None
        for h in self.http:
            h.sock.close()
        self.http = []
        self.sel.close()

    # ---- subscribing ----
    def subscribe(self):
        n = len(self.convs)
        for i, c in enumerate(self.convs):
            sock, rest = handshake(self.srv.port, "/sockets/events/%s?envelope=index"
                                   "&resend_mode=all" % c.id)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            c.sock = sock
            self.sel.register(sock, selectors.EVENT_READ, c)
            if rest:
                self.take(c, rest, time.time_ns())
            if (i + 1) % max(1, n // 4) == 0 or i + 1 == n:
                progress("  subscribed %d/%d" % (i + 1, n))
            if i % 50 == 0:
                self.pump(0)

    # ---- frames ----
    def take(self, c, data, now_ns):
        c.buf += data
        while True:
            b = c.buf
            if len(b) < 2:
                return
            n, at = b[1] & 0x7f, 2
            if n == 126:
                if len(b) < 4:
                    return
                n, at = int.from_bytes(b[2:4], "big"), 4
            elif n == 127:
                if len(b) < 10:
                    return
                n, at = int.from_bytes(b[2:10], "big"), 10
            if len(b) < at + n:
                return
            fin, op, payload = b[0] & 0x80, b[0] & 0x0f, b[at:at + n]
            c.buf = b[at + n:]
            if op == 0x9:                       # ping: pong
                c.sock.setblocking(True)
                c.sock.sendall(frame(0xA, payload))
                c.sock.setblocking(False)
            elif op == 0x8:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                raise BenchError("conversation %s: the server closed its WebSocket (%d %s)"
                                 % (c.id, code, payload[2:].decode("utf-8", "replace")))
            elif op in (0x1, 0x2, 0x0):
                c.frag = payload if op != 0 else (c.frag or b"") + payload
                if fin:
                    msg, c.frag = c.frag, None
                    self.event(c, json.loads(msg), now_ns)

    def event(self, c, f, now_ns):
        e = f.get("event") or {}
        if "index" in f:
            if f["index"] != c.index + 1:
                raise BenchError("conversation %s: index %d after %d (a lost or repeated "
                                 "frame)" % (c.id, f["index"], c.index))
            c.index = f["index"]
            self.frames += 1
        kind = e.get("kind")
        if kind in ("ConversationErrorEvent", "AgentErrorEvent"):
            c.error = "%s %s: %s" % (kind, e.get("code", ""), e.get("detail") or e.get("error"))
        if kind == "ConversationStateUpdateEvent":
            if e.get("key") == "full_state":
                c.status = (e.get("value") or {}).get("execution_status", c.status)
            elif e.get("key") == "execution_status":
                c.status = e.get("value")
                if c.status in ("error", "stuck", "paused") and not c.done:
                    c.failed = "status %s in turn %d (%s)" % (c.status, c.turn, c.error)
                    c.done = True
                    self.running -= 1
                    self.failed += 1
                elif c.status == "finished" and self.measuring and c.seen and not c.done:
                    t = time.monotonic()
                    self.turns.append(t - c.posted_at)
                    self.last_finish = t
                    self.next_turn(c)
        elif kind == "MessageEvent":
            parts = (e.get("llm_message") or {}).get("content") or []
            text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
            if e.get("source") == "user":
                if c.expect is not None and text == c.expect:
                    c.seen = True
            elif e.get("source") == "agent" and self.measuring and not c.done:
                for s in STAMP.findall(text):
                    self.lat.append(now_ns - int(s))

    # ---- turns ----
    def next_turn(self, c):
        if c.turn == self.a.turns:
            c.done = True
            c.expect = None
            self.running -= 1
            return
        c.turn += 1
        c.expect = "turn %d of conversation %s" % (c.turn, c.id)
        c.seen = False
        self.queue.append(c)
        self.dispatch()

    def dispatch(self):
        for h in self.http:
            if not self.queue:
                return
            if h.conv is None:
                c = self.queue.popleft()
                body = json.dumps({"role": "user", "content": [{"type": "text", "text": c.expect}],
                                   "run": True}).encode()
                req = ("POST /api/conversations/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                       % (c.id, len(body))).encode() + body
                h.conv = c
                c.posted_at = time.monotonic()
                h.sock.sendall(req)  # small: the server reads it at once

    def http_readable(self, h):
        got = h.sock.recv(65536)
        if not got:
            raise BenchError("the server closed an HTTP connection")
        h.buf += got
        while b"\r\n\r\n" in h.buf:
            head, rest = h.buf.split(b"\r\n\r\n", 1)
            m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            n = int(m.group(1)) if m else 0
            if len(rest) < n:
                return
            body, h.buf = rest[:n], rest[n:]
            status = int(head.split(b" ", 2)[1])
            c, h.conv = h.conv, None
            if status != 200:
                raise BenchError("POST a message to %s: %d %s"
                                 % (c.id if c else "?", status, body[:300].decode("utf-8",
                                                                                    "replace")))
        self.dispatch()

    def start_turns(self, nconns):
        nconns = max(1, min(nconns, len(self.convs)))
        for _ in range(nconns):
            h = HttpConn(self.srv.port)
            h.sock.setblocking(True)
            self.http.append(h)
            self.sel.register(h.sock, selectors.EVENT_READ, h)
        self.measuring = True
        self.running = len(self.convs)
        for c in self.convs:
            self.next_turn(c)

    def pump(self, timeout):
        for key, _ in self.sel.select(timeout):
            obj = key.data
            if isinstance(obj, HttpConn):
                self.http_readable(obj)
                continue
            try:
                got = obj.sock.recv(65536)
            except BlockingIOError:
                continue
            now = time.time_ns()
            if not got:
                raise BenchError("conversation %s: the server closed its WebSocket "
                                 "(no close frame)" % obj.id)
            self.take(obj, got, now)

    def until(self, what, cond, timeout, report, stall=60):
        """Pump until cond(); fail on a conversation that failed, after
        timeout s, or after `stall` s without a frame."""
        deadline = time.monotonic() + timeout
        next_report = time.monotonic() + 5
        last, last_at = self.frames, time.monotonic()
        while not cond():
            if self.failed:
                c = next(c for c in self.convs if c.failed)
                raise BenchError("waiting for %s, %d conversations failed, e.g. %s: %s; %s"
                                 % (what, self.failed, c.id, c.failed, report()))
            now = time.monotonic()
            if self.frames != last:
                last, last_at = self.frames, now
            if now > deadline or now - last_at > stall:
                raise BenchError("%s waiting for %s: %s"
                                 % ("timed out (%d s)" % timeout if now > deadline else
                                    "no frame for %d s" % stall, what, report()))
            if now > next_report:
                progress("  ... %s" % report())
                next_report = now + 5
                self.srv.check()
            self.pump(0.5)


# ---------------------------------------------------------------- run ---

def one_run(a, n, run_no):
    tmp = tempfile.mkdtemp(prefix="parley-bench-hosted.")
    srv = loop = None
    res = {}
    ok = False
    try:
        srv = Server(a, tmp)
        srv.start()
        res["command"] = srv.cmd
        time.sleep(0.2)
        rss0 = vmrss_kib(srv.pid)
        progress("N=%d run %d: server pid %d port %d, RSS %d KiB"
                 % (n, run_no, srv.pid, srv.port, rss0))

        body = json.dumps({"agent": {"kind": "ACPAgent", "acp_command": ["demo"]},
                           "initial_message": {"role": "user",
                                               "content": [{"type": "text", "text": "hi"}]}})
        http_c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        convs = []
        t = time.monotonic()
        for i in range(n):
            http_c.request("POST", "/api/conversations", body=body,
                           headers={"Content-Type": "application/json"})
            r = http_c.getresponse()
            b = r.read()
            if r.status != 201:
                raise BenchError("POST /api/conversations (#%d): %d %s"
                                 % (i + 1, r.status, b[:300].decode("utf-8", "replace")))
            convs.append(Conv(json.loads(b)["id"]))
            if (i + 1) % max(1, n // 4) == 0:
                progress("  created %d/%d" % (i + 1, n))
        http_c.close()
        res["create_s"] = time.monotonic() - t

        loop = Loop(srv, convs, a)
        loop.subscribe()
        loop.until("every first turn to finish",
                   lambda: all(c.status == "finished" for c in convs), a.timeout,
                   lambda: "statuses %s, %d agent processes"
                   % (dict(collections.Counter(c.status for c in convs)), len(srv.agent_pids())))
        srv.check()
        res["warmup_s"] = time.monotonic() - t
        res["agents_before"] = len(srv.agent_pids())
        progress("  %d conversations ready in %.1f s (created in %.1f s), %d agent processes"
                 % (n, res["warmup_s"], res["create_s"], res["agents_before"]))

        names = ("parley_events_appended_total", "parley_fsync_seconds_count")
        ev0, fs0 = metrics(srv.port, *names)
        frames0 = loop.frames
        kids = srv.agent_pids()
        cpu0 = (cpu_s(srv.pid), sum(cpu_s(p) for p in kids), time.process_time(), busy_s())
        t0 = time.monotonic()
        loop.start_turns(a.http_conns)
        loop.until("%d turns in each conversation" % a.turns, lambda: loop.running == 0,
                   a.timeout, lambda: "%d/%d conversations done, %d turns finished"
                   % (n - loop.running, n, len(loop.turns)))
        dt = loop.last_finish - t0
        srv.check()
        cpu1 = (cpu_s(srv.pid), sum(cpu_s(p) for p in kids), time.process_time(), busy_s())
        ev1, fs1 = metrics(srv.port, *names)
        res["events"] = int(ev1 - ev0)
        res["fsyncs"] = int(fs1 - fs0)
        res["cpu_server_s"], res["cpu_agents_s"], res["cpu_client_s"], busy = \
            [y - x for x, y in zip(cpu0, cpu1)]
        # the rest of what the machine did meanwhile: other processes, and
        # the kernel's work for nobody in particular (a neighbour's build
        # shows here)
        res["cpu_other_s"] = busy - res["cpu_server_s"] - res["cpu_agents_s"] - res["cpu_client_s"]
        res["frames"] = loop.frames - frames0
        res["turn_s"] = dt
        res["events_per_s"] = res["events"] / dt
        lat = sorted(loop.lat)
        res["stamps"] = len(lat)
        if len(lat) != n * a.turns * a.chunks:
            raise BenchError("%d stamps received, wanted %d (%d conversations x %d turns x %d "
                             "chunks)" % (len(lat), n * a.turns * a.chunks, n, a.turns, a.chunks))
        res["lat_p50_ms"] = pct(lat, 50) / 1e6
        res["lat_p99_ms"] = pct(lat, 99) / 1e6
        res["lat_max_ms"] = lat[-1] / 1e6
        turns = sorted(loop.turns)
        res["turn_p50_ms"] = pct(turns, 50) * 1e3
        res["turn_p99_ms"] = pct(turns, 99) * 1e3

        time.sleep(0.2)
        rss1 = vmrss_kib(srv.pid)
        kids = srv.agent_pids()
        res["agents"] = len(kids)
        agent_rss = [vmrss_kib(p) for p in kids if alive(p, kids[p])]
        res["agent_rss_kib"] = statistics.mean(agent_rss) if agent_rss else 0
        res["rss0_kib"], res["rss1_kib"] = rss0, rss1
        res["rss_per_conv"] = (rss1 - rss0) * 1024.0 / n
        progress("  %d turns: %d events in %.2f s = %.0f events/s (%d fdatasyncs); latency p50 "
                 "%.2f ms p99 %.2f ms max %.2f ms; CPU s: server %.2f, agents %.2f, client %.2f, "
                 "rest of the machine %.2f of %.2f; "
                 "RSS %d -> %d KiB (%.0f B/conv); %d agent processes (VmRSS %.0f KiB each)"
                 % (n * a.turns, res["events"], dt, res["events_per_s"], res["fsyncs"],
                    res["lat_p50_ms"], res["lat_p99_ms"], res["lat_max_ms"], res["cpu_server_s"],
                    res["cpu_agents_s"], res["cpu_client_s"], res["cpu_other_s"],
                    dt * os.cpu_count(), rss0, rss1, res["rss_per_conv"],
                    res["agents"], res["agent_rss_kib"]))
        warns = [ln for ln in srv.log_tail(1 << 30).splitlines() if ln.strip()]
        res["log_lines"] = len(warns)
        if warns:
            progress("  the server logged %d lines (warn and above), e.g.: %s"
                     % (len(warns), " | ".join(warns[:3])))
        ok = True
        return res
    except BenchError:
        if srv is not None and srv.proc is not None:
            progress("the server's log (warn and above), its end:\n" + srv.log_tail())
        raise
    finally:
        # a second Ctrl-C must not cut the cleanup short
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        rc, left = 0, []
        if loop is not None:
            loop.close()
        if srv is not None:
            t = time.monotonic()
            rc = srv.stop()
            left = srv.leftovers()
            progress("  server stopped (exit %s) in %.1f s; %d agent processes were seen, %d "
                     "left behind%s" % (rc, time.monotonic() - t, len(srv.agents), len(left),
                                        " (killed)" if left else ""))
            srv.log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGINT, old)
        if ok and rc != 0:
            raise BenchError("parley serve exited %s after SIGTERM" % rc)
        if ok and left:
            raise BenchError("%d agent processes outlived the server: %s" % (len(left), left))


def med(rs, k):
    return statistics.median(r[k] for r in rs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", default=os.path.join(ROOT, "build", "parley"),
                    help="the parley binary (default: build/parley of this tree)")
    ap.add_argument("--n", default="100,1000",
                    help="conversations (= agent processes), comma-separated (default 100,1000)")
    ap.add_argument("--turns", type=int, default=20, help="measured turns per conversation "
                    "(default 20), after the warm-up turn of the initial message")
    ap.add_argument("--runs", type=int, default=3, help="runs per N, each on a fresh server "
                    "(default 3); medians are reported")
    ap.add_argument("--chunks", type=int, default=3,
                    help="message chunks per turn: the demo agent's --chunks (default 3)")
    ap.add_argument("--agent-args", default="",
                    help="more options for `parley demo-agent`, e.g. --agent-args='--no-fs "
                    "--delay-ms 5' (--chunks has its own option)")
    ap.add_argument("--durability", default="full", help="serve --durability (default full)")
    ap.add_argument("--workers", type=int, default=0,
                    help="serve --workers (default: the server's, one per core)")
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for `parley serve` (repeatable)")
    ap.add_argument("--http-conns", type=int, default=32,
                    help="keep-alive connections that post the messages (default 32)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds allowed for each phase of a run (default 300)")
    ap.add_argument("--json", action="store_true", help="also print every run as JSON")
    a = ap.parse_args()
    try:
        ns = [int(x) for x in a.n.split(",") if x.strip()]
    except ValueError:
        ap.error("--n wants numbers, comma-separated")
    if not ns or min(ns) < 1 or a.turns < 1 or a.runs < 1 or not 0 < a.chunks <= 1000:
        ap.error("--n, --turns, --runs, --chunks must be positive (--chunks at most 1000)")
    a.parley = os.path.abspath(a.parley)
    if not os.access(a.parley, os.X_OK):
        ap.error("no parley binary at %s (build it, or give --parley)" % a.parley)
    a.agent_args = ("--chunks %d " % a.chunks) + a.agent_args

    # sockets: ours (a WebSocket per conversation and the pool); the server
    # inherits the limit (and raises its own soft limit to the hard one)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(ns) + a.http_conns + 100
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit("hosted_agents: %d conversations need %d open files; the hard limit is %d"
                     % (max(ns), need, hard))
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    # a SIGTERM to us stops the runs the way Ctrl-C does: cleanup included
    def on_term(*_):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_term)

    command = shlex.join([sys.executable] + sys.argv)
    progress("command: " + command)
    results = {}
    try:
        for n in ns:
            results[n] = []
            for r in range(1, a.runs + 1):
                results[n].append(one_run(a, n, r))
    except KeyboardInterrupt:
        progress("interrupted: everything started was stopped, the scratch directory removed")
        sys.exit(130)
    except BenchError as e:
        sys.exit("hosted_agents: %s" % e)

    serve = results[ns[0]][0]["command"]
    serve = [("<tmp>/data" if i > 0 and serve[i - 1] == "--data" else x)
             for i, x in enumerate(serve)]
    print("command: %s" % command)
    print("server:  %s" % shlex.join(serve))
    try:
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    print("%s; %d cores; %d measured turns per conversation after a warm-up turn; "
          "medians of %d runs (each on a fresh server)%s"
          % (time.strftime("%Y-%m-%d"), os.cpu_count(), a.turns, a.runs,
             "; tree " + rev if rev else ""))
    print()
    head = ["N", "events/s", "latency p50", "latency p99", "turn p50", "turn p99",
            "server CPU", "RSS/conv", "agents alive", "ready in"]
    rows = []
    for n in ns:
        rs = results[n]
        rows.append(["{:,}".format(n),
                     "{:,.0f}".format(med(rs, "events_per_s")),
                     "%.2f ms" % med(rs, "lat_p50_ms"),
                     "%.2f ms" % med(rs, "lat_p99_ms"),
                     "%.1f ms" % med(rs, "turn_p50_ms"),
                     "%.1f ms" % med(rs, "turn_p99_ms"),
                     "%.2f cores" % statistics.median(r["cpu_server_s"] / r["turn_s"] for r in rs),
                     "{:,.0f} B".format(med(rs, "rss_per_conv")),
                     "/".join(str(r["agents"]) for r in rs),
                     "%.1f s" % med(rs, "warmup_s")])
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |")
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    for r in rows:
        print("| " + " | ".join(v.rjust(w[i]) for i, v in enumerate(r)) + " |")
    print()
    print("events/s: events committed in all conversations while the turns ran / their wall "
          "time; latency: agent's stamp in a message chunk -> its frame at the subscriber; "
          "turn: message posted -> its `finished` frame; server CPU: during the turns; RSS/conv: the server's VmRSS growth "
          "/ N (agents excluded, one WebSocket per conversation open); agents alive: per run; "
          "ready in: create N conversations, subscribe, first turns finished.")
    if a.json:
        print(json.dumps({str(n): rs for n, rs in results.items()}))


if __name__ == "__main__":
    main()
