"""The federation front on the wall clock: several clients submitting to two fronts on PostgreSQL, the leader killed.

    python benchmarks/front_live.py [--jobs 200] [--clients 4] [--carbon-dir ../shared/carbon] [--kube]

Three ``quasched serve`` members (processes, 4 nodes × 8 A100 each, their own SQLite stores) in the grid zones GB,
DE-LU and US-CAL-CISO (the recorded intensities, ``signal = "file"``); two ``quasched federate`` processes
(``carbon-defer``) on one throwaway PostgreSQL 15 database, one leading, one standing by. ``--clients`` threads submit
``--jobs`` jobs in all (1 GPU, 20-60 s; one in four with 6 h of slack), each with a ``client_token``, retrying the same
token on the other front after a refused connection or a standby's 503. Once 40 % are acknowledged the leader is
SIGKILLed (the take-over is timed from the kill to the standby's ``/readyz`` 200) and restarted as the standby.
Afterwards: every acknowledged job is at the front once; every job sent is on one member once; the jobs to start now
are all sent; submission and dispatch (submitted → sent) latencies; kg CO2e of the jobs that ended against their
baseline (at once on the least loaded member). With ``--kube`` a fourth member in zone CA-ON is a real
kube-apiserver + kube-scheduler v1.20.2 with ``quasched serve --kube-extender`` (``tests/kube_cluster.py``: 2 nodes of 8
A100s, no kubelet: its pods are bound by kube-scheduler through quasched and stay pending there). Raw rows go to
``results/front_live.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from pg import PostgresServer  # noqa: E402
from serve_process import FrontProcess, ServeProcess, wait_for  # noqa: E402

from quasched.front.kubemember import TOKEN_ANNOTATION  # noqa: E402

ZONES = ("GB", "DE-LU", "US-CAL-CISO")
API = "/api/v1"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values[0] if values else float("nan"))


def client(fronts: list[FrontProcess], index: int, count: int, acked: dict, latency: list, errors: Counter) -> None:
    current = 0
    with httpx.Client(timeout=10) as http:
        for i in range(count):
            key = f"c{index}-{i:04d}"
            body = {"name": key, "team": "default", "cpu": 4, "memory": "16GiB", "gpus": 1,
                    "duration": 20 + (i * 7) % 41, "client_token": key}
            if i % 4 == 3:
                body["slack"] = "6h"
            while True:
                front = fronts[current]
                began = time.perf_counter()
                try:
                    reply = http.post(f"{front.url}{API}/jobs", json=body, headers={"Authorization": f"Bearer {front.token}"})
                except httpx.TransportError:
                    errors["refused"] += 1
                    current = 1 - current
                    time.sleep(0.1)
                    continue
                if reply.status_code == 503:
                    errors["standby"] += 1
                    current = 1 - current
                    time.sleep(0.05)
                    continue
                if reply.status_code not in (200, 201):
                    errors[f"http {reply.status_code}"] += 1
                    time.sleep(0.1)
                    continue
                latency.append(time.perf_counter() - began)
                acked[key] = reply.json()["id"]
                break


@contextmanager
def kube_member(work: Path) -> Iterator[Any]:
    """A real kube-apiserver + kube-scheduler with quasched as its extender, 2 nodes of 8 A100s; yields the cluster."""
    from kube_cluster import KubeCluster, NodeShape, Quasched

    q = Quasched(work / "kube-quasched", None)
    with KubeCluster(work / "k8s", q.verbs_url) as kc:
        q.attach(kc)
        kc.add_gpu_nodes([NodeShape(f"a100-{i}", 64_000, 512 * 1024, 8, "A100") for i in range(2)])
        q.start()
        try:
            q.ensure_queue("default")
            wait_for(lambda: len(q.nodes()) >= 2, 60, "quasched sees the Kubernetes nodes")
            yield kc
        finally:
            q.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--carbon-dir", type=Path, default=ROOT.parent / "shared" / "carbon")
    parser.add_argument("--kube", action="store_true", help="a fourth member: a real kube-scheduler with quasched")
    args = parser.parse_args()
    import os

    os.environ["QUASCHED_CARBON"] = str(args.carbon_dir.resolve())
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="quasched-front-live-") as tmp:
        work = Path(tmp)
        pg = PostgresServer()
        pg.start()
        stack.callback(pg.stop)
        (work / "box.yaml").write_text("pools:\n  - {name: box, count: 4, cpu: 64, memory: 256Gi, "
                                       "gpu: {model: A100, count: 8}}\n")
        members, rows = [], []
        for i, zone in enumerate(ZONES):
            home = work / f"member-{i}"
            home.mkdir()
            (home / "box.yaml").write_text((work / "box.yaml").read_text())
            server = ServeProcess("sqlite:///quasched.db", home, extra=("--cluster", "box.yaml"))
            server.start()
            stack.callback(server.kill)
            members.append(server)
            rows.append(f'[[member]]\nname = "{zone.lower()}"\nurl = "{server.url}"\nzone = "{zone}"\npue = 1.2\n'
                        f'token_file = "{home / "quasched.token"}"\n')
        kube = stack.enter_context(kube_member(work)) if args.kube else None
        if kube is not None:
            rows.append(f'[[member]]\nname = "kube"\nkind = "kubernetes"\nkubeconfig = "{kube.kubeconfig}"\n'
                        f'zone = "CA-ON"\npue = 1.1\nnamespace = "default"\nimage = "busybox"\n')
        (work / "members.toml").write_text("\n".join(rows))
        url = pg.create_database()
        fronts = []
        for name in ("a", "b"):
            home = work / f"front-{name}"
            home.mkdir()
            front = FrontProcess(url, home, work / "members.toml", extra=("--lease-ttl", "5"))
            if fronts:
                (home / front.token_name).write_text(fronts[0].token)
            front.start()
            fronts.append(front)
        stack.callback(lambda: [f.kill() for f in fronts if f.proc is not None and f.proc.poll() is None])
        wait_for(lambda: any(f.ready() for f in fronts), 60, "a front leads")
        acked: dict[str, int] = {}
        latency: list[float] = []
        errors: Counter = Counter()
        began = time.perf_counter()
        threads = [threading.Thread(target=client, args=(fronts, c, args.jobs // args.clients, acked, latency, errors))
                   for c in range(args.clients)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 0.4 * args.jobs, 300, "40 % acknowledged")
        leader = next(f for f in fronts if f.ready())
        standby = next(f for f in fronts if f is not leader)
        killed = time.perf_counter()
        leader.kill()
        wait_for(standby.ready, 60, "the standby takes over")
        take_over = time.perf_counter() - killed
        leader.start()  # back as the standby
        for t in threads:
            t.join()
        submitted_s = time.perf_counter() - began
        admin = {"Authorization": f"Bearer {standby.token}"}
        jobs = httpx.get(f"{standby.url}{API}/jobs", params={"limit": 1000}, headers=admin, timeout=30).json()
        now_jobs = [j for j in jobs if j["deadline"] - j["submitted_at"] < 3600]

        def all_sent() -> bool:
            got = {j["id"]: j for j in httpx.get(f"{standby.url}{API}/jobs", params={"limit": 1000}, headers=admin,
                                                 timeout=30).json()}
            return all(got[j["id"]]["remote"] is not None for j in now_jobs)

        wait_for(all_sent, 120, "every job to start now is sent")
        time.sleep(70)  # the runs end (20-60 s) and are read back
        jobs = httpx.get(f"{standby.url}{API}/jobs", params={"limit": 1000}, headers=admin, timeout=30).json()
        names = Counter(j["name"] for j in jobs)
        on_members = Counter(j["client_token"] for m in members for j in httpx.get(
            f"{m.url}{API}/jobs", params={"limit": 1000}, headers={"Authorization": f"Bearer {m.token}"},
            timeout=30).json())
        if kube is not None:  # the front's pods, by the client token they carry
            on_members.update(p["metadata"]["annotations"].get(TOKEN_ANNOTATION) for p in kube.pods().values()
                              if TOKEN_ANNOTATION in (p["metadata"].get("annotations") or {}))
        sent = [j for j in jobs if j["remote"] is not None]
        dispatch = [j["sent_at"] - j["submitted_at"] for j in sent if j["deadline"] - j["submitted_at"] < 3600]
        ended = [j for j in jobs if j["kg"] is not None]
        kg, baseline = sum(j["kg"] for j in ended), sum(j["baseline_kg"] or 0 for j in ended)
        result = {
            "jobs": args.jobs, "acknowledged": len(acked), "at_front_once": sum(1 for k in acked if names[k] == 1),
            "sent": len(sent), "on_members_twice": sum(1 for n in on_members.values() if n > 1),
            "deferred": sum(1 for j in jobs if j["remote"] is None and j["release_at"] and j["release_at"] > time.time()),
            "submissions_per_s": len(acked) / submitted_s,
            "submit_p50_ms": 1000 * percentile(latency, 50), "submit_p99_ms": 1000 * percentile(latency, 99),
            "dispatch_p50_ms": 1000 * percentile(dispatch, 50), "dispatch_p99_ms": 1000 * percentile(dispatch, 99),
            "take_over_s": take_over, "errors": dict(errors), "ended": len(ended), "kg": kg, "baseline_kg": baseline,
            "sent_to": dict(Counter(j["member"] for j in sent)),
        }
        (ROOT / "results").mkdir(exist_ok=True)
        (ROOT / "results" / "front_live.json").write_text(json.dumps({"summary": result, "jobs": jobs}, indent=1))
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
