#!/usr/bin/env python3
"""side_by_side.py - parley next to Redis Streams and a node `ws` server, in one go.

Same machine, same payload bytes, same connection counts, one run. Installs
what it needs (tools/bootstrap.sh --bench), builds parley and bench_redis
(Release, into build-bench/) unless given, then starts every server fresh on
127.0.0.1 for each line and runs each line RUNS times, printing medians and
the ratio parley/other as a Markdown table (stdout; progress on stderr):

  append     durable appends, 64 connections, one request outstanding each,
             1 KiB events over 64 conversations / streams, 2 client threads:
             parley (--durability full; parley load) vs Redis (XADD,
             appendonly yes, appendfsync always; bench_redis xadd), both
             clients C on libuv, so that neither side's figure is its
             client's (wrk's p99 on parley is ~25 ms, parley load's ~3.5);
             the servers' CPU per append, and the clients' (they share
             the cores), and the machine's by kind, with what the VM's
             host took (steal); the two sides' runs alternate, and each
             pair's ratios are printed below the table
  fanout     1 producer (arrays / pipelines of 50 events with 100 bytes of
             text, as fast as acknowledged) -> 1,000 subscribers: parley's
             WebSocket and node ws (bench/ws_broadcast.js), both driven by
             parley load, vs Redis XREAD BLOCK consumers (bench_redis fanout)
  paging     pages of 100 at random cursors of a 100,000-event log (300-byte
             texts), 64 connections, 2 client threads: parley events/search
             (parley load --readers on the filled conversation) vs Redis
             XRANGE with exclusive cursors (bench_redis xrange)
  idle-conn  server RSS per idle subscriber connection (2,000 of them):
             parley, node ws, Redis (clients blocked in XREAD)
  idle-conv  server RSS per conversation / stream (10,000 of them, 10 events
             of 100 bytes of text each): just written, and for parley also at
             rest, once --idle-close (1s here) has closed their logs. Enough
             of them that what a server grows by once (thread stacks, arenas,
             tables) does not pass for a cost per conversation: at 1,000 it
             is two thirds of parley's figure

Redis is started as `redis-server --appendonly yes --appendfsync always
--save '' --auto-aof-rewrite-percentage 0` on a scratch directory: every
write is fsynced before its reply, and AOF rewrites (a fork that rewrites the
whole data set, competing for the cores) are off during the run. It never
uses a system redis service. Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_http  # noqa: E402  (call, message, event_body, fill)
from bench_common import build_release, fmt, markdown  # noqa: E402

LINES = ["append", "fanout", "paging", "idle-conn", "idle-conv"]


def log(msg):
    print(f"side_by_side: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    sys.exit(f"side_by_side: {msg}")


def med(xs):
    return statistics.median(xs)


# ---- servers -----------------------------------------------------------------------

class Server:
    """A server process of this run: stopped with SIGTERM, killed if it lingers."""

    def __init__(self, name, proc, port, tmp):
        self.name, self.proc, self.port, self.tmp = name, proc, port, tmp

    @property
    def pid(self):
        return self.proc.pid

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.proc.returncode not in (0, -signal.SIGTERM):
            fail(f"{self.name} exited {self.proc.returncode}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_parley(a, extra=()):
    tmp = tempfile.mkdtemp(prefix="parley-sbs.")
    data = ("local:" if a.local else "") + os.path.join(tmp, "data")
    p = subprocess.Popen([a.parley, "serve", "--data", data,
                          "--listen", "127.0.0.1:0", "--durability", "full",
                          "--log-level", "warn"] + [str(x) for x in extra] + a.serve_arg,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line)
    if not m:
        p.kill()
        fail(f"parley serve did not start (first line {line!r})")
    return Server("parley serve", p, int(m.group(1)), tmp)


def start_node():
    tmp = tempfile.mkdtemp(prefix="parley-sbs-node.")
    p = subprocess.Popen(["node", os.path.join(ROOT, "bench", "ws_broadcast.js"), "0"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line)
    if not m:
        p.kill()
        fail(f"node bench/ws_broadcast.js did not start (first line {line!r}); "
             "tools/bootstrap.sh installs ws in tests/node")
    return Server("node ws_broadcast.js", p, int(m.group(1)), tmp)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def redis_ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(a):
    """redis-server cannot listen on port 0: take a port the kernel just
    handed out, and try another if someone took it in between."""
    for attempt in range(5):
        tmp = tempfile.mkdtemp(prefix="parley-sbs-redis.")
        port = free_port()
        p = subprocess.Popen([a.redis_server, "--port", str(port), "--bind", "127.0.0.1",
                              "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log"),
                              "--daemonize", "no", "--save", "", "--appendonly", "yes",
                              "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0",
                              "--maxclients", str(a.idle + 1000)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and p.poll() is None and not redis_ping(port):
            time.sleep(0.05)
        if p.poll() is None and redis_ping(port):
            return Server("redis-server", p, port, tmp)
        why = ""
        try:
            with open(os.path.join(tmp, "redis.log")) as f:
                why = f.read()[-300:]
        except OSError:
            pass
        if p.poll() is None:
            p.kill()
        p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"redis-server on port {port} did not start (attempt {attempt + 1}): {why.strip()}")
    fail("redis-server did not start in 5 attempts")


def cpu_s(pid):
    """The process' CPU time so far (user + system), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_jiffies():
    """The machine's CPU time so far by kind (/proc/stat), in clock ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return {"user": user + nice, "system": system, "softirq": irq + softirq,
            "idle": idle + iowait, "steal": steal}


class MachineWindow:
    """Where the whole machine's CPU goes while a run is steady: /proc/stat
    read 1 s after the run starts and 1 s before it ends, in a thread. The
    kernel's network receive work runs as softirq, charged to no process,
    so only this shows the kernel's share beside the servers' and clients'
    own CPU. per_event() divides by the run's rate times the window."""

    def __init__(self, duration_s):
        self.length = max(1.0, duration_s - 2.0)
        self.d = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        time.sleep(1.0)
        a, t0 = machine_jiffies(), time.monotonic()
        time.sleep(self.length)
        b, t1 = machine_jiffies(), time.monotonic()
        self.d = {k: (b[k] - a[k]) / os.sysconf("SC_CLK_TCK") for k in a}
        self.seconds = t1 - t0

    def per_event(self, per_s):
        self.t.join()
        if self.d is None or per_s <= 0:
            return {}
        return {k: v * 1e6 / (per_s * self.seconds) for k, v in self.d.items()}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    fail(f"no VmRSS for pid {pid}")


# ---- clients -----------------------------------------------------------------------

def run_json(args, what):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{what} failed ({r.returncode}): {r.stdout[-1500:]}{r.stderr[-1500:]}")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail(f"{what} printed no JSON: {r.stdout[-500:]}{r.stderr[-500:]}")


def bench_redis(a, srv, mode, *args):
    return run_json([a.bench_redis, mode, "--port", str(srv.port)] + [str(x) for x in args],
                    f"bench_redis {mode}")


def parley_load(a, srv, *args):
    """parley load's report, which must pass (ws_broadcast.js keeps its events
    and pages them, so its log is read back and checked as parley's is)."""
    r = subprocess.run([a.parley, "load", srv.url(), "--json", "--server-pid", str(srv.pid)]
                       + [str(x) for x in args], capture_output=True, text=True)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail(f"parley load against {srv.name} printed no JSON ({r.returncode}): "
             f"{r.stdout[-500:]}{r.stderr[-500:]}")
    if out.get("verdict") != "pass":
        fail(f"parley load against {srv.name}: verdict {out.get('verdict')}: "
             f"{out.get('verdict_detail')} (errors {out.get('errors')})")
    return out


# ---- the lines ---------------------------------------------------------------------

def line_append(a, res):
    body = json.dumps(bench_http.event_body(1024), separators=(",", ":"))
    log(f"append: {len(body)}-byte events, 64 connections, {a.runs} x {a.duration} s each")
    # parley load's agent message is this body with other text of the same
    # length: both clients are C on libuv, closed loop, 2 threads
    text = len(body) - len(body.split('"text":"', 1)[0]) - len('"text":"') - len('"}]}}')

    def parley_run():
        with start_parley(a) as srv:
            mw = MachineWindow(a.duration)
            r = parley_load(a, srv, "--conversations", 64, "--producers", 1,
                            "--subscribers", 0, "--event-size", text,
                            "--duration", f"{a.duration}s", "--threads", 2)
            r["machine"] = mw.per_event(r["events_per_s"])
        return r

    # each run on a fresh server, as parley's are: on one server the AOF of
    # the runs before makes each run slower than the last (64 k -> 47 k/s)
    def redis_run():
        with start_redis(a) as srv:
            payload = os.path.join(srv.tmp, "event.json")
            with open(payload, "w") as f:
                f.write(body)
            cpu0 = cpu_s(srv.pid)
            mw = MachineWindow(a.duration)
            r = bench_redis(a, srv, "xadd", "--connections", 64, "--threads", 2,
                            "--streams", 64, "--duration", a.duration,
                            "--payload", payload, "--key", "append")
            r["cpu_us"] = (cpu_s(srv.pid) - cpu0) * 1e6 / r["ops"]
            r["machine"] = mw.per_event(r["ops_per_s"])
        return r

    # The two sides' runs alternate, in pairs whose order alternates too
    # (parley first, then Redis first): this VM's speed drifts by 20-30%
    # over minutes, and all of one side's runs before all of the other's
    # gave the drift to one side. Each pair's ratios are printed too.
    pr, rr = [], []
    for i in range(a.runs):
        if i % 2 == 0:
            p = parley_run()
            r = redis_run()
        else:
            r = redis_run()
            p = parley_run()
        pr.append(p)
        rr.append(r)
        log(f"  pair {i + 1}/{a.runs}: parley {p['events_per_s']:,.0f} vs Redis "
            f"{r['ops_per_s']:,.0f} events/s ({p['events_per_s'] / r['ops_per_s']:.2f}x), "
            f"p99 {p['ack_ms']['p99']:.2f} vs {r['latency_ms']['p99']:.2f} ms")
    res["parley"]["append"] = {"per_s": med(r["events_per_s"] for r in pr),
                               "p50_ms": med(r["ack_ms"]["p50"] for r in pr),
                               "p99_ms": med(r["ack_ms"]["p99"] for r in pr),
                               "cpu_us": med(r["server"]["cpu_s"] * 1e6 / r["events"]
                                             for r in pr),
                               "client_cpu_us": med(r["client"]["cpu_s"] * 1e6 / r["events"]
                                                    for r in pr),
                               **machine_med(pr)}
    res["redis"]["append"] = {"per_s": med(r["ops_per_s"] for r in rr),
                              "p50_ms": med(r["latency_ms"]["p50"] for r in rr),
                              "p99_ms": med(r["latency_ms"]["p99"] for r in rr),
                              "cpu_us": med(r["cpu_us"] for r in rr),
                              "client_cpu_us": med(r["client_cpu_s"] * 1e6 / r["ops"]
                                                   for r in rr),
                              **machine_med(rr)}
    res["pairs"] = [{"rate": p["events_per_s"] / r["ops_per_s"],
                     "p99": p["ack_ms"]["p99"] / r["latency_ms"]["p99"]}
                    for p, r in zip(pr, rr)]


def machine_med(runs):
    """The medians of the runs' machine-wide CPU per append, by kind."""
    kinds = ("user", "system", "softirq", "idle", "steal")
    if not all(r.get("machine") for r in runs):
        return {}
    return {f"machine_{k}_us": med(r["machine"][k] for r in runs) for k in kinds}


def line_fanout(a, res):
    n = a.subscribers
    log(f"fanout: 1 producer -> {n} subscribers, batches of 50, {a.runs} x {a.duration} s")
    load = ["--producers", 1, "--subscribers", n, "--batch", 50, "--event-size", 100,
            "--duration", f"{a.duration}s", "--threads", 1]
    for who, start in (("parley", lambda: start_parley(a, ["--ws-max-subscribers", n + 10])),
                       ("node", start_node)):
        runs = []
        for i in range(a.runs):
            with start() as srv:
                runs.append(parley_load(a, srv, *load))
            log(f"  {who} fan-out run {i + 1}/{a.runs}: {runs[-1]['frames_per_s']:,.0f} "
                f"deliveries/s, p99 {runs[-1]['delivery_ms']['p99']:.1f} ms")
        res[who]["fanout"] = {"per_s": med(r["frames_per_s"] for r in runs),
                              "p50_ms": med(r["delivery_ms"]["p50"] for r in runs),
                              "p99_ms": med(r["delivery_ms"]["p99"] for r in runs),
                              "events_per_s": med(r["events_per_s"] for r in runs)}
    runs = []
    for i in range(a.runs):
        with start_redis(a) as srv:
            runs.append(bench_redis(a, srv, "fanout", "--subscribers", n, "--batch", 50,
                                    "--event-size", 100, "--duration", a.duration))
        log(f"  redis fan-out run {i + 1}/{a.runs}: {runs[-1]['entries_per_s']:,.0f} "
            f"deliveries/s, p99 {runs[-1]['delivery_ms']['p99']:.1f} ms")
    res["redis"]["fanout"] = {"per_s": med(r["entries_per_s"] for r in runs),
                              "p50_ms": med(r["delivery_ms"]["p50"] for r in runs),
                              "p99_ms": med(r["delivery_ms"]["p99"] for r in runs),
                              "events_per_s": med(r["events_per_s"] for r in runs)}


def line_paging(a, res):
    log(f"paging: {a.events:,} events of 300 bytes of text, pages of 100, "
        f"{a.runs} x {a.duration} s")
    with start_parley(a) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
        cid = bench_http.call(conn, "POST", "/api/conversations", {})["id"]
        t = time.monotonic()
        bench_http.fill(conn, cid, a.events, 300)
        conn.close()
        log(f"  parley: appended {a.events:,} events in {time.monotonic() - t:.1f} s")
        # 64 readers in parley load (C on libuv, 2 threads, as bench_redis),
        # each from the first event, then from random ids its pages showed
        runs = []
        for i in range(a.runs):
            runs.append(parley_load(a, srv, "--conversation", cid, "--producers", 0,
                                    "--subscribers", 0, "--readers", 64, "--threads", 2,
                                    "--duration", f"{a.duration}s"))
            log(f"  parley search run {i + 1}/{a.runs}: {runs[-1]['reads_per_s']:,.0f} pages/s")
    res["parley"]["paging"] = {"per_s": med(r["reads_per_s"] for r in runs),
                               "p50_ms": med(r["read_ms"]["p50"] for r in runs),
                               "p99_ms": med(r["read_ms"]["p99"] for r in runs)}
    with start_redis(a) as srv:
        r = bench_redis(a, srv, "xrange", "--connections", 64, "--threads", 2,
                        "--fill", a.events, "--event-size", 300, "--count", 100,
                        "--runs", a.runs, "--duration", a.duration, "--key", "paging")
    for i, x in enumerate(r["runs"]):
        log(f"  redis XRANGE run {i + 1}/{a.runs}: {x['pages_per_s']:,.0f} pages/s")
    res["redis"]["paging"] = {"per_s": med(x["pages_per_s"] for x in r["runs"]),
                              "p50_ms": med(x["latency_ms"]["p50"] for x in r["runs"]),
                              "p99_ms": med(x["latency_ms"]["p99"] for x in r["runs"])}


def line_idle_conn(a, res):
    n = a.idle
    log(f"idle-conn: {n:,} idle subscriber connections, RSS on a fresh server, {a.runs} runs")
    for who, start in (("parley", lambda: start_parley(a, ["--ws-max-subscribers", n + 10,
                                                           "--max-connections", n + 100])),
                       ("node", start_node)):
        runs = []
        for i in range(a.runs):
            with start() as srv:
                out = parley_load(a, srv, "--idle", "--subscribers", n, "--duration", "3s")
            runs.append(out["idle"]["bytes_per_connection"])
            log(f"  {who} run {i + 1}/{a.runs}: {runs[-1]:,.0f} bytes per connection")
        res[who]["idle_conn"] = {"bytes": med(runs)}
    runs = []
    for i in range(a.runs):
        with start_redis(a) as srv:
            out = bench_redis(a, srv, "idle", "--connections", n, "--hold", 3,
                              "--server-pid", srv.pid)
        runs.append(out["bytes_per_connection"])
        log(f"  redis run {i + 1}/{a.runs}: {runs[-1]:,.0f} bytes per connection "
            f"(used_memory says {out['used_memory_per_connection']:,.0f})")
    res["redis"]["idle_conn"] = {"bytes": med(runs)}


def turn(j, size):
    """Event j of an idle conversation: user and agent messages in turn (an
    agent talking to itself would be flagged by the stuck detector)."""
    e = bench_http.message(j, size)
    if j % 2 == 0:
        e["source"], e["llm_message"]["role"] = "user", "user"
    return e


def logs_open(srv):
    """How many conversations have their log open (/metrics), whatever the
    store: the local store's descriptors, the pool's in-memory indexes."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    finally:
        conn.close()
    m = re.search(r"^parley_conversations_open (\d+)", body, re.M)
    if m is None:
        fail("parley: /metrics has no parley_conversations_open")
    return int(m.group(1))


def line_idle_conv(a, res):
    n, k = a.conversations, 10
    log(f"idle-conv: {n:,} conversations / streams of {k} events, RSS on a fresh server, "
        f"{a.runs} runs")
    hot, rest = [], []
    for i in range(a.runs):
        with start_parley(a, ["--idle-close", "1s"]) as srv:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
            time.sleep(1)
            before = rss_kib(srv.pid)
            for c in range(n):
                cid = bench_http.call(conn, "POST", "/api/conversations", {})["id"]
                bench_http.call(conn, "POST", f"/api/conversations/{cid}/events/append",
                                [turn(j, 100) for j in range(k)])
            conn.close()
            hot.append((rss_kib(srv.pid) - before) * 1024 / n)
            # at rest: every log closed (--idle-close 1s), nothing of theirs open
            deadline = time.monotonic() + 60
            while logs_open(srv) > 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            if logs_open(srv) > 0:
                fail("parley: the idle conversations' logs did not close within 60 s")
            rest.append((rss_kib(srv.pid) - before) * 1024 / n)
        log(f"  parley run {i + 1}/{a.runs}: {hot[-1]:,.0f} bytes per conversation just "
            f"written, {rest[-1]:,.0f} with its log closed")
    res["parley"]["idle_conv"] = {"bytes": med(hot)}
    res["parley"]["rest_conv"] = {"bytes": med(rest)}
    runs = []
    for i in range(a.runs):
        with start_redis(a) as srv:
            time.sleep(1)
            out = bench_redis(a, srv, "idle", "--streams", n, "--events", k, "--event-size", 100,
                              "--hold", 3, "--server-pid", srv.pid)
        runs.append(out["bytes_per_stream"])
        log(f"  redis run {i + 1}/{a.runs}: {runs[-1]:,.0f} bytes per stream "
            f"(used_memory says {out['used_memory_per_stream']:,.0f})")
    res["redis"]["idle_conv"] = {"bytes": med(runs)}
    res["redis"]["rest_conv"] = {"bytes": med(runs)}  # a stream is always in memory


# ---- the table ---------------------------------------------------------------------

def ratio(p, o, higher_better):
    """p/o and who it favours; higher_better None: a figure that explains
    the others, better in neither direction (no ratio)."""
    if higher_better is None or p is None or o is None or o <= 0 or p <= 0:
        return "—"  # an RSS that shrank while connections opened: noise, no ratio
    r = p / o
    ahead = r > 1 if higher_better else r < 1
    return f"{r:.2f} ({'parley ahead' if ahead else 'parley behind'})"


def table(res, a):
    rows = []

    def get(who, line, key):
        return res.get(who, {}).get(line, {}).get(key)

    def row(name, line, key, kind, higher_better, node=False):
        p, r = get("parley", line, key), get("redis", line, key)
        n = get("node", line, key) if node else None
        rows.append((name, fmt(p, kind), fmt(r, kind), fmt(n, kind),
                     ratio(p, r, higher_better), ratio(p, n, higher_better) if node else "—"))

    if "append" in res["parley"]:
        row("durable append, events/s (64 conns, 1 KiB)", "append", "per_s", "n", True)
        row("  append latency p50, ms", "append", "p50_ms", "ms", False)
        row("  append latency p99, ms", "append", "p99_ms", "ms", False)
        row("  server CPU per append, us (user + system)", "append", "cpu_us", "us", False)
        # the clients share the machine's cores with the servers: what each
        # spends is what it leaves them (parley load; bench_redis)
        row("  client CPU per append, us", "append", "client_cpu_us", "us", False)
        # the whole machine while the run is steady (/proc/stat): the
        # kernel's receive work is softirq, charged to neither process; on
        # a machine whose cores are all busy, rate = cores / the sum
        row("  machine CPU per append: user, us", "append", "machine_user_us", "us", False)
        row("  machine CPU per append: system, us", "append", "machine_system_us", "us", False)
        row("  machine CPU per append: softirq, us", "append", "machine_softirq_us", "us",
            False)
        row("  machine CPU per append: idle, us", "append", "machine_idle_us", "us", None)
        # a VM's cores taken by its host meanwhile: a side's run that met
        # more of it was slowed by its neighbours, not by its own work
        row("  machine CPU per append: stolen by the host, us", "append", "machine_steal_us",
            "us", None)
    if "fanout" in res["parley"]:
        row(f"fan-out 1 -> {a.subscribers:,}, deliveries/s", "fanout", "per_s", "n", True, True)
        row("  producer events/s (batches of 50)", "fanout", "events_per_s", "n", True, True)
        row("  delivery latency p50, ms", "fanout", "p50_ms", "ms", False, True)
        row("  delivery latency p99, ms", "fanout", "p99_ms", "ms", False, True)
    if "paging" in res["parley"]:
        row("paging, pages of 100/s (random cursors)", "paging", "per_s", "n", True)
        row("  page latency p50, ms", "paging", "p50_ms", "ms", False)
        row("  page latency p99, ms", "paging", "p99_ms", "ms", False)
    if "idle_conn" in res["parley"]:
        row(f"memory per idle subscriber, bytes ({a.idle:,})", "idle_conn", "bytes", "n",
            False, True)
    if "idle_conv" in res["parley"]:
        row(f"memory per conversation just written, bytes ({a.conversations:,} x 10 "
            "events)", "idle_conv", "bytes", "n", False)
        row("  the same at rest (its log closed: --idle-close)", "rest_conv", "bytes", "n",
            False)
    return markdown(("line", "parley", "Redis Streams", "node ws", "parley/Redis", "parley/node"),
                    rows)


# ---- main --------------------------------------------------------------------------

def build(a):
    bdir = build_release(["parley", "bench_redis"], log)
    a.parley = a.parley or os.path.join(bdir, "parley")
    a.bench_redis = a.bench_redis or os.path.join(bdir, "bench_redis")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", help="the parley binary, a Release build (default: build it)")
    ap.add_argument("--bench-redis", help="the bench_redis binary (default: build it)")
    ap.add_argument("--redis-server", default="redis-server", help="(default: from PATH)")
    ap.add_argument("--runs", type=int, default=3, help="runs per line, medians (default 3)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (default 5)")
    ap.add_argument("--subscribers", type=int, default=1000, help="fan-out subscribers")
    ap.add_argument("--events", type=int, default=100000, help="events of the paged log")
    ap.add_argument("--idle", type=int, default=2000, help="idle subscriber connections")
    ap.add_argument("--conversations", type=int, default=10000, help="idle conversations")
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="one more argument to every `parley serve` (repeatable)")
    ap.add_argument("--only", choices=LINES, action="append", help="run only these lines")
    ap.add_argument("--no-bootstrap", action="store_true",
                    help="skip tools/bootstrap.sh --bench (everything is installed)")
    ap.add_argument("--local", action="store_true",
                    help="parley on the local store (a directory per conversation, "
                         "--data local:DIR) instead of the default pool")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    a = ap.parse_args()
    if a.runs < 1 or a.duration < 1:
        fail("--runs and --duration must be at least 1")
    if not a.no_bootstrap:
        log("tools/bootstrap.sh --bench")
        subprocess.run([os.path.join(ROOT, "tools", "bootstrap.sh"), "--bench"], check=True,
                       stdout=sys.stderr)
    for tool in ("node", a.redis_server):
        if shutil.which(tool) is None:
            fail(f"{tool} is missing (tools/bootstrap.sh --bench installs it)")
    if a.parley is None or a.bench_redis is None:
        build(a)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # servers and clients inherit it
    if hard < a.idle + a.subscribers + 200:
        fail(f"{a.idle:,} idle connections need more than the {hard} open files allowed")
    versions = {
        "redis": subprocess.run([a.redis_server, "--version"], capture_output=True,
                                text=True).stdout.strip(),
        "node": subprocess.run(["node", "--version"], capture_output=True,
                               text=True).stdout.strip(),
        "cpus": os.cpu_count(),
    }
    log(f"{versions['redis']}; node {versions['node']}; {versions['cpus']} cpus")
    res = {"parley": {}, "redis": {}, "node": {}, "pairs": []}
    t = time.monotonic()
    fns = {"append": line_append, "fanout": line_fanout, "paging": line_paging,
           "idle-conn": line_idle_conn, "idle-conv": line_idle_conv}
    for name in LINES:
        if a.only is None or name in a.only:
            fns[name](a, res)
    log(f"done in {time.monotonic() - t:.0f} s")
    print(f"side by side: {a.runs} runs per line (medians), {a.duration} s each, "
          f"{versions['cpus']} cpus; {versions['redis'].split(' sha=')[0]}, node "
          f"{versions['node']}\n")
    print(table(res, a))
    if res.get("pairs"):
        print("\ndurable append, pair by pair (parley/Redis, runs alternated): rate "
              + ", ".join(f"{x['rate']:.2f}" for x in res["pairs"]) + "; p99 "
              + ", ".join(f"{x['p99']:.2f}" for x in res["pairs"]))
    if a.json:
        print(json.dumps({"config": vars(a), "versions": versions, "results": res}))


if __name__ == "__main__":
    main()
