"""Load on `quasched serve`: many concurrent clients submitting to the openb cluster (1,213 nodes).

    python benchmarks/service_load.py --data-dir ../shared/traces [--jobs 10000] [--clients 32] [--db sqlite|postgresql]

The server runs in its own process (uvicorn with httptools as ``quasched serve``, one worker, FGD, SQLite WAL by
default) on 127.0.0.1 with the openb node list; ``--clients`` concurrent
connections submit ``--jobs`` jobs drawn
from the openb-default pod shapes, each running 5-60 s of wall time, so
completions and queue retries happen during the run. The clients are bare HTTP/1.1 keep-alive
connections in this one process (asyncio, uvloop), so that they take little of the cores the server
runs on. Reported: errors, API
throughput, request latency p50/p99, the server process's CPU time per
submission (and the clients') with the machine's load average (on a shared machine the CPU cost
is the stable figure), and from the server's Prometheus histograms the
scheduling-cycle latency and the submissions per group commit.

    python benchmarks/service_load.py --data-dir ../shared/traces --typical [--jobs 3000]

``--typical`` (in this process, no server): what following the typical pods learned from the submissions costs,
policy ``guard`` (the service's default). openb-default's first ``--jobs`` pods arrive in creation order (placed
until 80 % of the GPUs are allocated, then only decided), on the built-in cluster and on the openb cluster:
median CPU of an arrival (learning it and deciding) with and without a rebuild of the typical pods (the difference
is one rebuild: the typical pods, the policy's terms on them and the fragmentation table of every node); then, over
all of openb-default's arrivals, the rebuilds and the lag of the mix in use behind the window's (total variation
distance) with the ``drift`` given to the window (1: a rebuild every 200 arrivals only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import uvloop

from quasched.extras import require_or_exit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SERVER = """
import sys, uvicorn
from pathlib import Path
from quasched.traces import catalog
from quasched.policies.registry import parse_spec
from quasched.service.api.app import create_app
from quasched.service.loop.state import LoopOptions
from quasched.kube.nodelay import NoDelayHttpToolsProtocol
nodes, _ = catalog.load_trace("openb-default", data_dir=Path(sys.argv[1]))
app = create_app(sys.argv[2], nodes, options=LoopOptions(policy=parse_spec("fgd")))
print("TOKEN", app.state.service.new_admin_token, flush=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning", access_log=False,
            http=NoDelayHttpToolsProtocol)  # as `quasched serve`
"""


def bodies(data_dir: Path, n: int, seed: int) -> list[dict]:
    """Job bodies with openb-default's pod shapes (sampled), 5-60 s each."""
    from quasched.traces import catalog

    _, pods = catalog.load_trace("openb-default", data_dir=data_dir)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(pods), n)
    out = []
    for i, r in enumerate(rows.tolist()):
        gpus = pods.num_gpu[r] * pods.gpu_milli[r] / 1000 if pods.num_gpu[r] > 1 else pods.gpu_milli[r] / 1000
        out.append({"name": f"load-{i}", "team": "default", "cpu": max(0.001, pods.cpu_milli[r] / 1000),
                    "memory": f"{max(1, int(pods.memory_mib[r]))}MiB", "gpus": float(gpus),
                    "gpu_model": "", "duration": float(rng.uniform(5, 60)), "client_token": f"load-{i}"})
    return out


def requests(token: str, jobs: list[dict]) -> list[bytes]:
    """Each job's ``POST /api/v1/jobs`` as bytes on the wire (HTTP/1.1, keep-alive)."""
    out = []
    for body in jobs:
        data = json.dumps(body).encode()
        out.append(b"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (token.encode(), len(data), data))
    return out


async def submit_all(port: int, wire: list[bytes], clients: int) -> tuple[list[float], dict[int, int]]:
    """Send ``wire`` over ``clients`` keep-alive connections, one request at a time on each: latencies and
    status counts (-1: the connection failed). A bare HTTP/1.1 client, so that the clients' CPU (on the same
    cores) stays small next to the server's."""
    latencies: list[float] = []
    status: dict[int, int] = {}
    pending = list(reversed(wire))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while pending:
            request = pending.pop()
            start = time.perf_counter()
            try:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
                await reader.readexactly(length)
                code = int(head[9:12])
            except (OSError, asyncio.IncompleteReadError, IndexError, ValueError):
                code = -1
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            latencies.append(time.perf_counter() - start)
            status[code] = status.get(code, 0) + 1
        writer.close()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, status


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc): the server's cost, whatever else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def histogram_quantiles(metrics: str, name: str, qs=(0.5, 0.99)) -> dict[float, float]:
    """Quantiles (upper bucket bounds) of a Prometheus histogram from its text exposition."""
    buckets = []
    for line in metrics.splitlines():
        if line.startswith(f"{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    if not buckets:
        return {}
    total = buckets[-1][1]
    return {q: next(le for le, count in buckets if count >= q * total) for q in qs}


def typical_rebuilds(data_dir: Path, jobs: int) -> None:
    """``--typical`` (module docstring)."""
    from quasched.metrics.typical import TypicalWindow
    from quasched.model.cluster import Cluster
    from quasched.policies import Scheduler, make_policy
    from quasched.service.runtime.service import default_cluster
    from quasched.sim.engine import make_stream, node_ranks
    from quasched.traces import catalog

    openb, workload = catalog.load_trace("openb-default", data_dir=data_dir)
    arrivals = [workload.pod(int(row), uid) for uid, row in enumerate(np.argsort(workload.creation_time, kind="stable"))]
    for name, nodes in (("built-in", default_cluster()), ("openb", openb)):
        rng = make_stream("native", 0)
        cluster, window = Cluster(nodes), TypicalWindow()
        scheduler = Scheduler(cluster, make_policy("guard", window), node_ranks(nodes, rng), rng)
        cpu: dict[tuple[bool, bool], list[float]] = {(a, b): [] for a in (True, False) for b in (True, False)}
        for i, pod in enumerate(arrivals[:jobs]):
            start, known = time.process_time(), window.current
            window.observe(pod)
            if cluster.gpu_allocated < 0.8 * 1000 * cluster.total_gpus:
                scheduler.schedule(pod)
            else:
                scheduler.decide(pod)
            cpu[i < 200, window.current is not known].append(time.process_time() - start)
        print(f"{name} ({len(nodes.name)} nodes), GPU allocation {cluster.gpu_allocated / 10 / cluster.total_gpus:.0f} "
              f"% at the end, {jobs} arrivals:")
        for early in (True, False):
            with_, without = (1000 * float(np.median(cpu[early, k])) for k in (True, False))
            print(f"  {'first 200' if early else 'later'}: {len(cpu[early, True])} rebuilds, CPU per arrival {with_:.2f}"
                  f" ms with one, {without:.2f} ms without: one rebuild {with_ - without:.2f} ms (medians)")
        spent = sum(sum(v) for v in cpu.values())
        print(f"  all rebuilds: {(sum(cpu[True, True]) + sum(cpu[False, True])) / spent:.0%} of this loop's CPU")
    for drift in (1.0, 0.1, 0.05, 0.02):
        window, rebuilds, lag = TypicalWindow(drift=drift), 0, []
        for pod in arrivals:
            known = window.current
            window.observe(pod)
            rebuilds += window.current is not known
            lag.append(window.distance())
        print(f"drift {drift:g}: {rebuilds} rebuilds in {len(arrivals)} arrivals, lag of the mix in use: first 200 "
              f"mean {np.mean(lag[:200]):.3f} max {max(lag[:200]):.3f}, all mean {np.mean(lag):.3f} max {max(lag):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                        help="postgresql: a throwaway server on 127.0.0.1 (tests/pg.py)")
    parser.add_argument("--typical", action="store_true", help="the cost of following the typical pods, no server")
    args = parser.parse_args()
    if args.db == "postgresql":
        require_or_exit("postgres", "psycopg")
    if args.typical:
        return typical_rebuilds(args.data_dir, args.jobs)
    jobs = bodies(args.data_dir, args.jobs, args.seed)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        db = f"sqlite:///{tmp}/load.db"
        if args.db == "postgresql":
            from pg import PostgresServer

            pg = PostgresServer()
            pg.start()
            stack.callback(pg.stop)
            db = pg.create_database()
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(args.data_dir), db, str(args.port)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        token = proc.stdout.readline().split()[1]
        url = f"http://127.0.0.1:{args.port}"
        for _ in range(600):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        wire = requests(token, jobs)
        started, cpu, own = time.perf_counter(), cpu_seconds(proc.pid), cpu_seconds(os.getpid())
        latencies, status = uvloop.run(submit_all(args.port, wire, args.clients))
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(proc.pid) - cpu
        own = cpu_seconds(os.getpid()) - own
        load = os.getloadavg()[0]
        auth = {"Authorization": f"Bearer {token}"}
        metrics = httpx.get(f"{url}/metrics", headers=auth, timeout=30).text
        snapshot = httpx.get(f"{url}/api/v1/snapshot", headers=auth, timeout=30).json()
        proc.terminate()
        proc.wait()
    ms = np.array(latencies) * 1000
    errors = sum(v for k, v in status.items() if k not in (200, 201))
    print(f"{args.db}: {args.jobs} submissions from {args.clients} clients on {len(snapshot['nodes'])} nodes: "
          f"{errors} errors ({status}), {args.jobs / elapsed:.0f} submissions/s, {elapsed:.1f} s")
    print(f"server CPU {cpu / args.jobs * 1000:.1f} ms per submission ({args.jobs / cpu:.0f} submissions per "
          f"CPU second); machine load average {load:.1f} on {os.cpu_count()} cores")
    print(f"clients (this process) CPU {own / args.jobs * 1000:.2f} ms per submission")
    print(f"request latency ms: p50 {np.percentile(ms, 50):.1f}  p99 {np.percentile(ms, 99):.1f}  max {ms.max():.0f}")
    q = histogram_quantiles(metrics, "quasched_scheduling_decision_seconds")
    if q:
        print(f"server scheduling cycle: p50 <= {q[0.5] * 1000:g} ms, p99 <= {q[0.99] * 1000:g} ms (bucket bounds)")
    q = histogram_quantiles(metrics, "quasched_submission_group_size")
    if q:
        print(f"submissions per group commit: p50 <= {q[0.5]:g}, p99 <= {q[0.99]:g} (bucket bounds)")
    print(f"end: {snapshot['running']} running, {snapshot['pending']} pending, "
          f"GPU allocation {snapshot['gpu_allocation_pct']:.1f} %")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
