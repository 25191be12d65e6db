"""Durability of `quasched serve`: concurrent submissions while the server is SIGKILLed and restarted.

    python benchmarks/service_durability.py [--db sqlite|postgresql] [--jobs 2000] [--clients 8] [--kills 5]
    python benchmarks/service_durability.py --commands --jobs 300 --kills 3
    python benchmarks/service_durability.py --db postgresql --standby --jobs 4000 --kills 3

A real server process (``quasched serve``, the built-in cluster) on 127.0.0.1;
``--clients`` threads submit ``--jobs`` jobs in all (0.5, 1 or 2 GPUs, no
duration, so they stay running or pending), each with an idempotency key
(``client_token``), retrying the same key until the server answers. A killer
sends SIGKILL ``--kills`` times, evenly spread, and restarts the server on
the same database. Afterwards, on a freshly restarted server:

* every submission that was acknowledged is present exactly once (by key);
* no job holds more placements than pods, no GPU device is over 1000 milli
  and no node over its CPU, recomputed from the jobs themselves and compared
  with the server's own snapshot (the in-memory cluster rebuilt from the DB);
* queue order is kept: each client's jobs have increasing ids in the order
  it submitted them.

With ``--commands`` the cluster is this machine alone (8 fake GPUs) and every job runs a real
command (``sh -c 'sleep S; exit K'``, K = its index mod 4) that outlives the kills; afterwards every
acknowledged job has ended as its command chose (exit 0: succeeded, else failed with that exit code;
none ``Lost``), and no process is left running. As root the commands run as a throw-away OS user
(``tests/accounts.py``); otherwise as the benchmark's own account (``--run-as-self``).

With ``--standby`` (PostgreSQL) a second server stands by: clients send to the one they last reached
and switch on a refused connection or a standby's 503; each SIGKILL hits the leader, the take-over
time is measured from the kill to the standby's ``/readyz`` answering 200, and the killed server
restarts as the new standby.

PostgreSQL runs on a throwaway Debian server (``tests/pg.py``); the servers are ``tests/serve_process.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from pathlib import Path

import httpx

from quasched.extras import require_or_exit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from accounts import command_accounts, serve_options, shared_dir  # noqa: E402
from serve_process import ServeProcess as Server, wait_for  # noqa: E402


def exit_code(key: str) -> int:
    """The exit code the command of job ``key`` (``c<client>-<i>``) chooses: i mod 4."""
    return int(key.rsplit("-", 1)[1]) % 4


def client(servers: list[Server], index: int, count: int, acked: dict, errors: Counter, stop: threading.Event,
           commands: bool = False) -> None:
    sizes = (0.5, 1, 2)
    current = 0
    with httpx.Client(timeout=10) as http:
        for i in range(count):
            key = f"c{index}-{i:05d}"
            body = {"name": key, "team": "default", "cpu": 1, "memory": "4GiB", "gpus": sizes[(index + i) % 3],
                    "client_token": key}
            if commands:
                body["command"] = ["/bin/sh", "-c", f"sleep {0.2 + 0.3 * (i % 4)}; exit {exit_code(key)}"]
            while not stop.is_set():
                server = servers[current]
                try:
                    reply = http.post(f"{server.url}/api/v1/jobs", json=body,
                                      headers={"Authorization": f"Bearer {server.token}"})
                except httpx.TransportError:
                    errors["transport (server down, retried)"] += 1
                    current = (current + 1) % len(servers)
                    time.sleep(0.05)
                    continue
                if reply.status_code in (200, 201):
                    acked[key] = reply.json()["id"]
                    break
                errors[f"HTTP {reply.status_code}"] += 1
                if reply.status_code == 503:  # a standby: try the other server
                    current = (current + 1) % len(servers)
                time.sleep(0.05)


def check(server: Server, acked: dict[str, int], clients: int) -> list[str]:
    """Everything the module docstring promises; returns the violations."""
    headers = {"Authorization": f"Bearer {server.token}"}
    jobs, offset = [], 0
    while True:
        page = httpx.get(f"{server.url}/api/v1/jobs", params={"limit": 1000, "offset": offset}, headers=headers,
                         timeout=30).json()
        jobs += page
        offset += len(page)
        if len(page) < 1000:
            break
    problems = []
    keys = Counter(j["client_token"] for j in jobs)
    problems += [f"key {k} stored {n} times" for k, n in keys.items() if n > 1]
    by_key = {j["client_token"]: j for j in jobs}
    problems += [f"acknowledged {k} (job {i}) missing" for k, i in acked.items() if k not in by_key]
    problems += [f"key {k}: acknowledged as job {i}, stored as {by_key[k]['id']}" for k, i in acked.items()
                 if k in by_key and by_key[k]["id"] != i]
    used: defaultdict[tuple[str, int], float] = defaultdict(float)
    for job in jobs:
        placement = job["placement"]
        if job["state"] in ("running", "preempting"):
            if len(placement) != job["pods"]:
                problems.append(f"job {job['id']} has {len(placement)} placements for {job['pods']} pods")
            for p in placement:
                for d in p["devices"]:
                    used[p["node"], d] += job["gpus"] / max(1, len(p["devices"])) * 1000
        elif placement:
            problems.append(f"job {job['id']} is {job['state']} but holds {placement}")
    problems += [f"device {k} holds {v:.0f} milli" for k, v in used.items() if v > 1000 + 1e-6]
    snapshot = httpx.get(f"{server.url}/api/v1/snapshot", headers=headers, timeout=30).json()
    served = {(n["name"], d): m for n in snapshot["nodes"] for d, m in enumerate(n["gpu_used_milli"]) if m}
    recomputed = {k: round(v) for k, v in used.items() if v}
    if served != recomputed:
        problems.append(f"snapshot disagrees with the stored placements on {len(set(served.items()) ^ set(recomputed.items()))} devices")
    problems += [f"node {n['name']} CPU over capacity" for n in snapshot["nodes"] if n["cpu_used_milli"] > n["cpu_milli"]]
    for c in range(clients):
        ids = [by_key[k]["id"] for k in sorted(by_key) if k.startswith(f"c{c}-")]
        if ids != sorted(ids):
            problems.append(f"client {c}: ids out of submission order")
    return problems


def stale_writes(db: str) -> list[str]:
    """Events written under a lease epoch older than one already written (a fenced leader's commit)."""
    from sqlalchemy import select

    from quasched.service.store.database import EVENTS, Store

    store = Store(db)
    with store.engine.connect() as conn:
        epochs = list(conn.scalars(select(EVENTS.c.epoch).order_by(EVENTS.c.id)))
    store.close()
    problems, newest = [], 0
    for i, epoch in enumerate(epochs):
        if epoch < newest:
            problems.append(f"event {i} written under epoch {epoch} after epoch {newest}")
        newest = max(newest, epoch)
    return problems


def check_commands(server: Server, acked: dict[str, int], workdir: Path) -> tuple[list[str], Counter]:
    """Wait until every job has ended; the violations of ``--commands``' promises, and the jobs' end states."""
    headers = {"Authorization": f"Bearer {server.token}"}
    deadline = time.monotonic() + 900
    while True:
        jobs = {j["client_token"]: j for state in ("pending", "running", "stopping")
                for j in httpx.get(f"{server.url}/api/v1/jobs", params={"state": state, "limit": 1000},
                                   headers=headers, timeout=30).json()}
        if not jobs or time.monotonic() > deadline:
            break
        time.sleep(1)
    problems, ends = [], Counter()
    for key, job_id in acked.items():
        job = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers, timeout=30).json()
        code = exit_code(key)
        ends[job["state"] if job["reason"] is None else f"{job['state']} ({job['reason']['code']})"] += 1
        if job["state"] != ("succeeded" if code == 0 else "failed") or job["exit_code"] != code:
            problems.append(f"job {job_id} ({key}): {job['state']}, exit code {job['exit_code']}, expected {code}")
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs_under(int(pid), workdir)]
    problems += [f"process {pid} still runs" for pid in left]
    return problems, ends


def _runs_under(pid: int, workdir: Path) -> bool:
    try:
        return "run_wrapper" in Path(f"/proc/{pid}/cmdline").read_text() and \
            str(workdir) in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def kill_leader(servers: list[Server]) -> tuple[float, float]:
    """SIGKILL the leader; with a standby, the seconds until it is the leader and the seconds of its rebuild (as it
    reports them), then restart the killed one as standby."""
    if len(servers) == 1:
        servers[0].kill()
        servers[0].start()
        return 0.0, 0.0
    wait_for(lambda: any(s.ready() for s in servers), 60, "a leader")
    leader = next(s for s in servers if s.ready())
    killed = time.monotonic()
    leader.kill()
    other = next(s for s in servers if s is not leader)
    wait_for(other.ready, 60, "the standby takes over")
    took = time.monotonic() - killed
    rebuilt = [float(m.group(1)) for line in other.output if (m := re.search(r"rebuilt .* in ([0-9.]+) s", line))]
    leader.start()
    return took, rebuilt[-1] if rebuilt else float("nan")


def run(db_kind: str, jobs: int, clients: int, kills: int, port: int, commands: bool = False,
        standby: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        pg = None
        if db_kind == "postgresql":
            from pg import PostgresServer

            pg = PostgresServer()
            pg.start()
            db = pg.create_database()
        else:
            db = f"sqlite:///{tmp}/quasched.db"
        extra: tuple[str, ...] = ()
        if commands:
            (Path(tmp) / "box.yaml").write_text(
                "pools:\n  - {name: box, count: 1, cpu: 64, memory: 256Gi, gpu: {model: T4, count: 8}}\n")
            accounts = stack.enter_context(command_accounts())  # as root: a throw-away user runs the commands
            jobs_dir = shared_dir()
            stack.callback(shutil.rmtree, jobs_dir, ignore_errors=True)
            extra = ("--cluster", "box.yaml", "--grace", "2", *serve_options(accounts, jobs_dir))
        servers = [Server(db, Path(tmp), port + i, extra) for i in range(2 if standby else 1)]
        for server in servers:
            server.start()
        takeovers: list[tuple[float, float]] = []
        acked: dict[str, int] = {}
        errors: Counter = Counter()
        stop = threading.Event()
        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(servers, c, jobs // clients, acked, errors, stop, commands))
                   for c in range(clients)]
        for t in threads:
            t.start()
        killed = 0
        while killed < kills and any(t.is_alive() for t in threads):
            target = (killed + 1) * jobs / (kills + 1)
            while len(acked) < target and any(t.is_alive() for t in threads):
                time.sleep(0.01)
            takeovers.append(kill_leader(servers))
            killed += 1
        for t in threads:
            t.join(timeout=600)
        elapsed = time.perf_counter() - started
        for server in servers:
            server.kill()
        server = servers[0]
        server.start()  # the final state comes from a fresh rebuild (after the dead leader's lease ran out)
        wait_for(server.ready, 60, "the last server is the leader")
        problems = check(server, acked, clients) + stale_writes(db)
        ends: Counter = Counter()
        if commands:
            more, ends = check_commands(server, acked, Path(tmp).resolve())
            problems += more
        server.kill()
        if pg is not None:
            pg.stop()
    print(f"{db_kind}{' with a standby' if standby else ''}: {len(acked)} acknowledged of {jobs} in {elapsed:.1f} s "
          f"with {killed} SIGKILLs; retries: {dict(errors)}")
    if standby:
        took, rebuilt = [t for t, _ in takeovers], [r for _, r in takeovers]
        print(f"  take-over (SIGKILL of the leader to the standby's /readyz 200): p50 {statistics.median(took):.1f} s, "
              f"max {max(took):.1f} s over {len(took)}; of which the rebuild from the store: p50 "
              f"{statistics.median(rebuilt):.1f} s, max {max(rebuilt):.1f} s")
    print("  every acknowledged job present exactly once, none placed twice, no device or node over capacity, "
          "client order kept, no write of a stale leader: " + ("YES" if not problems else f"NO ({len(problems)} problems)"))
    if commands:
        print(f"  commands: every job ended as its command chose, none lost, none left running: "
              f"{'YES' if not problems else 'NO'}; ends {dict(ends)}")
    for p in problems[:20]:
        print("   -", p)
    if problems:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--commands", action="store_true", help="jobs run real commands on this machine's node")
    parser.add_argument("--standby", action="store_true", help="a second server stands by (PostgreSQL)")
    args = parser.parse_args()
    if args.standby and args.db != "postgresql":
        parser.error("--standby needs --db postgresql (one server per SQLite database)")
    if args.db == "postgresql":
        require_or_exit("postgres", "psycopg")
    os.environ.setdefault("MPLBACKEND", "Agg")
    run(args.db, args.jobs, args.clients, args.kills, args.port, args.commands, args.standby)


if __name__ == "__main__":
    main()
