#!/usr/bin/env python3
"""cluster.py - parley on a NATS JetStream cluster next to the local store, in one go.

Durable appends driven by `parley load` (closed loop, C on libuv: 64
connections, one request outstanding each, 970-byte texts, so about 1 KiB
events, over 64 conversations, 2 client loops; the append line of
bench/side_by_side.py), against:

  local      `parley serve --data DIR --durability full`: the default (pool)
             store, each group commit fdatasynced before its acks
  one        a cluster on this machine: 3 nats-servers (R3 streams) and 2
             parley nodes (`--store nats://...`), all of the load on node 1
  split      the same cluster, the load split across the two nodes: two
             `parley load` at once, one per node, each with half of the
             conversations and half of the client loops (a conversation is
             owned by the node that created it, so each node writes its
             own; nothing is forwarded)
  shards     `split` with the conversations on 1, 4 and 16 shard streams
             (`parley serve --nats-shards K`); 16 is the default, so its
             row is the `split` row

Each run starts everything fresh: a new local store, a new cluster (new
nats-servers on free loopback ports, empty JetStream directories) and new
parley nodes, so no run finds another's streams or conversations. The
cases take turns within each round (local, one, split at each shard count,
then again), so that a change in the machine's load falls on every case
alike; each figure is the median over the rounds (--runs). Reported per
case: appends per second, ack latency p50 and p99 (split: the p50 of the
two loads weighted by their events, the higher of their p99s), and CPU time
per event of the parley processes (both nodes) and of the nats-servers
(`parley load --server-pid` and `--cpu-pid`: over the run and its drain,
not the setup or the read-back check). Every `parley load` must pass its
verdict (every acked event at its acked index, once); a run that does not
is reported (its directory is kept, for the logs) and makes the
exit status 1.

Everything runs on this machine and binds 127.0.0.1 only: on one machine
the cluster's three servers, two nodes and the client share its cores,
so its events/s say what the cluster costs here, not what three machines
would do. nats-server 2.9.10 (Debian 12) acknowledges once a majority of
replicas has the write in memory (no fsync: see the README), while the
local store's acks wait for fdatasync.

Every process it starts (nats-servers, parley nodes, parley load) is
stopped on the way out, on failure and on Ctrl-C or SIGTERM too; its
temporary directories are removed (kept, and named, when a process failed,
for its logs). Needs nats-server (tools/bootstrap.sh installs it) and a
parley built with libnats. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import nats_cluster  # noqa: E402  (Cluster: start, urls, pids, stop)
from bench_common import build_release, fmt, markdown  # noqa: E402

CASES = ["local", "one", "split"]
LISTEN_DEADLINE_S = 60.0


def log(msg):
    print(f"cluster: {msg}", file=sys.stderr, flush=True)


class Failed(Exception):
    """A process of the run failed: the run stops, everything is stopped."""


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---- processes ---------------------------------------------------------------------

class Run:
    """What one run of one case started: stopped, all of it, by close()."""

    def __init__(self, name):
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix=f"parley-cluster-{name}.")
        self.procs = []  # (name, Popen)
        self.cluster = None
        self.keep = False

    def spawn(self, name, argv):
        """A process in a session of its own (Ctrl-C reaches this script,
        which stops it), stdout and stderr into files of the run."""
        out = open(os.path.join(self.tmp, f"{name}.out"), "wb")
        err = open(os.path.join(self.tmp, f"{name}.err"), "wb")
        try:
            p = subprocess.Popen([str(x) for x in argv], stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=err, start_new_session=True)
        finally:
            out.close()
            err.close()
        self.procs.append((name, p))
        return p

    def output(self, name, what="out", tail=None):
        try:
            with open(os.path.join(self.tmp, f"{name}.{what}"), errors="replace") as f:
                s = f.read()
        except OSError:
            return ""
        return s[-tail:] if tail else s

    def fail(self, msg):
        self.keep = True
        raise Failed(msg)

    def close(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log(f"{self.name}: {name} (pid {p.pid}) did not stop in 30 s: SIGKILL")
                p.kill()
                p.wait()
        if self.cluster is not None:
            self.cluster.stop()
        if self.keep:  # the logs, not the streams' data
            for i in (1, 2, 3):
                shutil.rmtree(os.path.join(self.tmp, "nats", f"n{i}", "js"), ignore_errors=True)
            log(f"{self.name}: kept {self.tmp} (logs: *.err, nats/n*/server.log)")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def start_parley(run, a, name, extra):
    """`parley serve ... --listen 127.0.0.1:0`: its URL, from its first line."""
    p = run.spawn(name, [a.parley, "serve", "--listen", "127.0.0.1:0", "--log-level", "warn",
                         "--data", os.path.join(run.tmp, name)] + extra)
    end = time.monotonic() + LISTEN_DEADLINE_S
    while True:
        first = run.output(name).split("\n", 1)
        if len(first) == 2:
            m = re.match(r"listening on (http://127\.0\.0\.1:\d+)$", first[0].strip())
            if not m:
                run.fail(f"{name}: first line {first[0]!r}, not `listening on ...`")
            return p, m.group(1)
        if p.poll() is not None:
            run.fail(f"{name} exited {p.returncode} while starting: "
                     f"{run.output(name, 'err', 1500)}")
        if time.monotonic() > end:
            run.fail(f"{name} did not listen within {LISTEN_DEADLINE_S:.0f} s: "
                     f"{run.output(name, 'err', 1500)}")
        time.sleep(0.02)


def start_cluster(run, a, shards):
    """3 nats-servers (free loopback ports, ready by /healthz) and 2 parley
    nodes on them: (urls, nats pids, [(pid, url) of n1, n2])."""
    run.cluster = nats_cluster.Cluster(os.path.join(run.tmp, "nats"), 3)
    try:
        urls = run.cluster.start()
    except RuntimeError as e:
        run.fail(f"the NATS cluster did not start: {e}")
    nodes = []
    for k in (1, 2):
        p, url = start_parley(run, a, f"n{k}", ["--store", urls, "--node-id", f"n{k}",
                                                "--nats-shards", shards])
        nodes.append((p, url))
    return urls, run.cluster.pids(), nodes


def load_args(a, conversations, threads):
    return ["--conversations", conversations, "--producers", 1, "--subscribers", 0,
            "--event-size", a.event_size, "--duration", f"{a.duration}s", "--threads", threads]


def start_load(run, a, name, url, pid, cpu_pids, conversations, threads):
    argv = [a.parley, "load", url, "--json", "--server-pid", pid]
    if cpu_pids:
        argv += ["--cpu-pid", ",".join(str(x) for x in cpu_pids)]
    return run.spawn(name, argv + load_args(a, conversations, threads))


def wait_load(run, a, name, p):
    """parley load's JSON report; a fail verdict is kept, and said."""
    try:
        p.wait(timeout=a.duration + 600)
    except subprocess.TimeoutExpired:
        run.fail(f"{name} did not finish within {a.duration + 600} s")
    lines = run.output(name).strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (ValueError, IndexError):
        run.fail(f"{name} printed no JSON ({p.returncode}): {run.output(name, tail=500)}"
                 f"{run.output(name, 'err', 1000)}")
    if out.get("verdict") != "pass":
        run.keep = True
        log(f"  {run.name}: {name}: verdict {out.get('verdict')}: "
            f"{out.get('verdict_detail')} (errors {out.get('errors')})")
    elif out.get("errors"):
        log(f"  {run.name}: {name}: passed with errors {out.get('errors')}")
    return out


def check_alive(run, names):
    for name, p in run.procs:
        if name in names and p.poll() is not None:
            run.fail(f"{name} exited {p.returncode} during the run: "
                     f"{run.output(name, 'err', 1500)}")


def cpu_of(out, pids):
    """CPU seconds of these pids in a load's report (--cpu-pid)."""
    got = {c["pid"]: c["cpu_s"] for c in out.get("cpu_pids", [])}
    xs = [got.get(p) for p in pids]
    return None if any(x is None or x < 0 for x in xs) else sum(xs)


# ---- the cases ---------------------------------------------------------------------

def case_local(a, rnd):
    run = Run("local")
    try:
        p, url = start_parley(run, a, "serve", ["--durability", "full"])
        out = wait_load(run, a, "load",
                        start_load(run, a, "load", url, p.pid, [], a.conversations, a.threads))
        check_alive(run, ["serve"])
        return {"events": out["events"], "per_s": out["events_per_s"],
                "p50_ms": out["ack_ms"]["p50"], "p99_ms": out["ack_ms"]["p99"],
                "parley_cpu_s": out["server"]["cpu_s"], "nats_cpu_s": None,
                "pass": out["verdict"] == "pass", "errors": out.get("errors", {})}
    finally:
        run.close()


def case_one(a, rnd):
    """All of the load on node 1 (which owns every conversation it creates);
    node 2 idles beside it on the same cluster."""
    run = Run("one")
    try:
        urls, nats, nodes = start_cluster(run, a, 16)
        (p1, u1), (p2, _) = nodes
        out = wait_load(run, a, "load", start_load(run, a, "load", u1, p1.pid, [p2.pid] + nats,
                                                   a.conversations, a.threads))
        check_alive(run, ["n1", "n2"])
        other = cpu_of(out, [p2.pid])
        return {"events": out["events"], "per_s": out["events_per_s"],
                "p50_ms": out["ack_ms"]["p50"], "p99_ms": out["ack_ms"]["p99"],
                "parley_cpu_s": (out["server"]["cpu_s"] + other
                                 if other is not None and out["server"]["cpu_s"] >= 0 else None),
                "nats_cpu_s": cpu_of(out, nats),
                "pass": out["verdict"] == "pass", "errors": out.get("errors", {})}
    finally:
        run.close()


def case_split(a, rnd, shards):
    """Two `parley load` at once, one per node, half of the conversations
    and of the client loops each."""
    run = Run(f"split{shards}")
    try:
        urls, nats, nodes = start_cluster(run, a, shards)
        half = a.conversations // 2
        threads = max(1, a.threads // 2)
        loads = [(f"load{k}", start_load(run, a, f"load{k}", url, p.pid, nats,
                                         half if k == 1 else a.conversations - half, threads))
                 for k, (p, url) in enumerate(nodes, 1)]
        outs = [wait_load(run, a, name, p) for name, p in loads]
        check_alive(run, ["n1", "n2"])
        events = sum(o["events"] for o in outs)
        cpu = [o["server"]["cpu_s"] for o in outs]
        nc = [cpu_of(o, nats) for o in outs]
        errors = {}
        for o in outs:
            for k, v in o.get("errors", {}).items():
                errors[k] = errors.get(k, 0) + v
        return {"events": events, "per_s": sum(o["events_per_s"] for o in outs),
                "p50_ms": (sum(o["ack_ms"]["p50"] * o["events"] for o in outs) / events
                           if events else None),
                "p99_ms": max(o["ack_ms"]["p99"] for o in outs),
                "parley_cpu_s": sum(cpu) if min(cpu) >= 0 else None,
                # both loads measure the same servers over nearly the same span
                "nats_cpu_s": statistics.mean(nc) if None not in nc else None,
                "per_node_per_s": [o["events_per_s"] for o in outs],
                "pass": all(o["verdict"] == "pass" for o in outs), "errors": errors}
    finally:
        run.close()


def summarize(runs):
    def per_event(key):
        return med([r[key] * 1e6 / r["events"] if r[key] is not None and r["events"] else None
                    for r in runs])

    total = [(r["parley_cpu_s"] + (r["nats_cpu_s"] or 0)) * 1e6 / r["events"]
             if r["parley_cpu_s"] is not None and r["events"] else None for r in runs]
    return {"per_s": med([r["per_s"] for r in runs]),
            "p50_ms": med([r["p50_ms"] for r in runs]),
            "p99_ms": med([r["p99_ms"] for r in runs]),
            "parley_cpu_us": per_event("parley_cpu_s"),
            "nats_cpu_us": per_event("nats_cpu_s"),
            "total_cpu_us": med(total),
            "runs": len(runs), "failed": sum(not r["pass"] for r in runs),
            "each": runs}


# ---- the table ---------------------------------------------------------------------

def table(res, a):
    rows = []
    names = {"local": "local store (pool, --durability full)",
             "one": "cluster, all on node 1 (16 shards)"}
    for key, s in res.items():
        name = names.get(key) or (f"cluster, split over 2 nodes, {key[5:]} shard"
                                  f"{'s' if key != 'split1' else ''}")
        rows.append((name, fmt(s["per_s"], "n"), fmt(s["p50_ms"], "ms"), fmt(s["p99_ms"], "ms"),
                     fmt(s["parley_cpu_us"], "us"), fmt(s["nats_cpu_us"], "us"),
                     fmt(s["total_cpu_us"], "us"),
                     "pass" if s["failed"] == 0 else f"FAIL {s['failed']}/{s['runs']}"))
    return markdown(("case", "events/s", "ack p50 ms", "ack p99 ms", "parley CPU us/event",
                     "NATS CPU us/event", "total CPU us/event", "verdict"), rows)


# ---- main --------------------------------------------------------------------------

def build(a):
    a.parley = os.path.join(build_release(["parley"], log), "parley")


def on_signal(signum, frame):
    # once: the stopping that follows is not interrupted again
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--parley", help="the parley binary, a Release build with libnats "
                                     "(default: build it into build-bench/)")
    ap.add_argument("--runs", type=int, default=3, help="rounds, medians (default 3)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per load (default 5)")
    ap.add_argument("--conversations", type=int, default=64,
                    help="conversations, one connection each (default 64)")
    ap.add_argument("--event-size", type=int, default=970,
                    help="bytes of each event's text (default 970: about 1 KiB events)")
    ap.add_argument("--threads", type=int, default=2, help="client loops (default 2)")
    ap.add_argument("--shards", default="1,4,16",
                    help="shard stream counts of the split series (default 1,4,16)")
    ap.add_argument("--only", choices=CASES, action="append",
                    help="run only these cases (split: the whole shard series)")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    a = ap.parse_args()
    if a.runs < 1 or a.duration < 1 or a.conversations < 2 or a.threads < 1:
        sys.exit("cluster: --runs, --duration and --threads must be at least 1, "
                 "--conversations at least 2")
    try:
        shards = [int(x) for x in a.shards.split(",")]
        if not shards or any(k < 1 or k > 1024 for k in shards):
            raise ValueError
    except ValueError:
        sys.exit(f"cluster: --shards wants counts from 1 to 1024, comma-separated, "
                 f"not {a.shards!r}")
    if shutil.which(nats_cluster.NATS_SERVER) is None:
        sys.exit("cluster: nats-server is missing (tools/bootstrap.sh installs it)")
    if a.parley is None:
        build(a)
    help_text = subprocess.run([a.parley, "serve", "--help"], capture_output=True,
                               text=True).stdout
    if "--nats-shards" not in help_text:
        sys.exit(f"cluster: {a.parley} has no --nats-shards: an older parley")
    versions = {
        "nats_server": subprocess.run([nats_cluster.NATS_SERVER, "--version"],
                                      capture_output=True, text=True).stdout.strip(),
        "parley": subprocess.run([a.parley, "--version"], capture_output=True,
                                 text=True).stdout.strip(),
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg()[0],
    }
    cases = []
    if a.only is None or "local" in a.only:
        cases.append(("local", lambda r: case_local(a, r)))
    if a.only is None or "one" in a.only:
        cases.append(("one", lambda r: case_one(a, r)))
    if a.only is None or "split" in a.only:
        for k in shards:
            cases.append((f"split{k}", lambda r, k=k: case_split(a, r, k)))
    log(f"{versions['nats_server']}; {versions['parley']}; {versions['cpus']} cpus; "
        f"load average {versions['loadavg_before']:.2f}; {a.runs} rounds of "
        f"{len(cases)} cases, {a.duration} s of load each")
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    runs = {name: [] for name, _ in cases}
    t = time.monotonic()
    try:
        for rnd in range(a.runs):
            for name, fn in cases:
                t0 = time.monotonic()
                r = fn(rnd)
                runs[name].append(r)
                extra = (" (nodes " + " + ".join(f"{x:,.0f}" for x in r["per_node_per_s"]) + ")"
                         if "per_node_per_s" in r else "")
                log(f"  round {rnd + 1}/{a.runs} {name}: {r['per_s']:,.0f} events/s{extra}, "
                    f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                    f"{'pass' if r['pass'] else 'FAIL'} ({time.monotonic() - t0:.0f} s)")
    except Failed as e:
        sys.exit(f"cluster: {e}")
    except KeyboardInterrupt:
        sys.exit("cluster: interrupted; every process it started is stopped")
    versions["loadavg_after"] = os.getloadavg()[0]
    elapsed = time.monotonic() - t
    log(f"done in {elapsed:.0f} s (load average {versions['loadavg_after']:.2f})")
    res = {name: summarize(rs) for name, rs in runs.items()}
    print(f"cluster: {a.runs} runs per case (medians), {a.duration} s each, "
          f"{a.conversations} conversations, {a.event_size}-byte texts, {a.threads} client "
          f"loops, {versions['cpus']} cpus; {versions['nats_server']}\n")
    print(table(res, a))
    if a.json:
        print(json.dumps({"config": vars(a), "versions": versions, "elapsed_s": elapsed,
                          "results": res}))
    if any(s["failed"] for s in res.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
