"""Benchmark: GPU pods through a real kube-scheduler v1.20.2 with quasched serve as its extender.

    python benchmarks/kube_e2e.py [--nodes 200] [--pods 1000] [--data-dir ../shared/traces] [--json out.json]
    python benchmarks/kube_e2e.py --failover [--rate 40] [--kill-after 300] [--json out.json]
    python benchmarks/kube_e2e.py --in-process [--nodes 1000] [--pods 1000] [--policy guard]
    python benchmarks/kube_e2e.py --nodes 1000 --pods 3000 --gangs 200 [--gang-size 4] [--alone]

``--in-process`` needs no binaries: it calls filter (the decision) and bind on the extender's Bridge directly
(node names only, as with ``nodeCacheCapable``) and reports p50/p99/mean per verb.

Needs the binaries of ``deploy/e2e/build-k8s.sh`` (tests/kube_cluster.py). Steps:

1. etcd + kube-apiserver + kube-scheduler on 127.0.0.1, ``--nodes`` fake GPU nodes sampled from
   openb's, ``quasched serve --kubeconfig`` as the extender (filter, bind; nodeCacheCapable);
2. ``--pods`` GPU pods from the openb trace (first GPU pods in creation order: whole GPUs and
   shares of one), all queued while the scheduler is stopped, each with ``spec.priority``
   descending so kube-scheduler's queue takes them in trace order; then the scheduler starts and
   the clock runs until its active and backoff queues are empty;
3. throughput (bound pods / s, from a watch of the pods), extender latency per verb from quasched's side (its
   ``quasched_http_request_duration_seconds`` histogram for the ``/k8s/scheduler/*`` routes,
   p50/p99 interpolated within buckets), kube-scheduler's own attempt and binding latency;
With ``--failover``: two replicas of deploy/quasched.yaml (kube-scheduler + quasched sidecar each, leader
election on the Lease), the pods streamed at ``--rate`` per second, ``kill -9`` of the leader pair once
``--kill-after`` pods are bound; reports how long binding stopped (kill -> first bind by the survivor), the
Lease hand-over, pods bound, devices over-committed, the survivor's books against the bindings, and the
FailedScheduling events (from a watch of the pods, times to the millisecond).

With ``--gangs G``: ``G`` pod groups of ``--gang-size`` pods (2 GPUs each; the PodGroup CRD of
deploy/podgroup-crd.yaml, minMember = the size) spread evenly through the trace's pods; reports the groups bound
whole, partly (all or nothing: must be 0) and not at all, and the single pods' rate, instead of step 4. With
``--alone`` as well: the same nodes and single pods through kube-scheduler alone (no extender; it counts the shares
as an extended resource), the rate to compare in the same harness.

4. placement quality: the same pod sequence through quasched's own loop
   (:class:`quasched.service.loop.controller.Controller`, the service's policy and seed, FIFO, one cycle per
   pod) on the same nodes; compares pods placed, GPUs allocated per model, and the node/devices of each pod.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from quasched.extras import require_or_exit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kube_cluster import (DEVICES, GPU, SHARES, KubeCluster, Pairs, Quasched, missing, openb_nodes,  # noqa: E402
                          pod_manifest, replicas_missing, wait_for)

VERBS = ("filter", "bind")


def trace_pods(count: int, data_dir: str | None) -> list[dict[str, Any]]:
    """The first ``count`` GPU pods of openb-default in creation order (whole GPUs or a share)."""
    from quasched.traces.catalog import load_trace

    _, w = load_trace("openb-default", data_dir=Path(data_dir) if data_dir else None)
    order = np.argsort(np.asarray(w.creation_time), kind="stable")
    out: list[dict[str, Any]] = []
    for row in order:
        num, milli = int(w.num_gpu[row]), int(w.gpu_milli[row])
        if num == 0:
            continue
        i = len(out)
        fraction = milli / 1000 if num == 1 and milli < 1000 else None
        m = pod_manifest(f"p-{i:04d}", gpus=num, fraction=fraction, model=str(w.gpu_model[row]) or None,
                         cpu_milli=max(1, int(w.cpu_milli[row])), memory_mib=max(1, int(w.memory_mib[row])))
        m["spec"]["priority"] = count - i  # kube-scheduler's queue: higher priority first = trace order
        out.append(m)
        if len(out) == count:
            break
    return out


#: where the benchmark's PodGroups live (deploy/podgroup-crd.yaml)
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def with_gangs(singles: list[dict[str, Any]], gangs: int, size: int) -> list[dict[str, Any]]:
    """``singles`` with ``gangs`` groups of ``size`` 2-GPU pods spread evenly among them, priorities renumbered so
    kube-scheduler's queue takes them in this order."""
    out: list[dict[str, Any]] = []
    every = max(1, len(singles) // (gangs + 1))
    for i, single in enumerate(singles):
        out.append(single)
        g = (i + 1) // every - 1
        if (i + 1) % every == 0 and 0 <= g < gangs:
            for k in range(size):
                m = pod_manifest(f"g-{g:03d}-{k}", gpus=2, cpu_milli=4000, memory_mib=16 * 1024)
                m["metadata"]["labels"] = {GROUP_LABEL: f"g-{g:03d}"}
                out.append(m)
    for i, m in enumerate(out):
        m["spec"]["priority"] = len(out) - i
    return out


def create_groups(kc: KubeCluster, gangs: int, size: int) -> None:
    """The PodGroup CRD and ``gangs`` PodGroups of minMember ``size``."""
    import yaml

    crd = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy" / "podgroup-crd.yaml").read_text())
    kc.check(kc.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd))
    wait_for("the PodGroup CRD is served", lambda: kc.api.get(PODGROUPS).status_code == 200, 60)
    for g in range(gangs):
        kc.check(kc.api.post(PODGROUPS, json={"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                              "metadata": {"name": f"g-{g:03d}"},
                                              "spec": {"minMember": size, "scheduleTimeoutSeconds": 120}}))


def gang_outcome(pods: dict[str, dict[str, Any]], gangs: int, size: int) -> dict[str, int]:
    """Groups bound whole, partly and not at all."""
    counts = collections.Counter[str]()
    for g in range(gangs):
        bound = sum(1 for k in range(size) if (pods.get(f"g-{g:03d}-{k}", {}).get("spec") or {}).get("nodeName"))
        counts["whole" if bound == size else "none" if bound == 0 else "partly"] += 1
    return {key: counts[key] for key in ("whole", "partly", "none")}


def run_alone(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """The same nodes and single pods through kube-scheduler alone (no extender), timed as :func:`run_kube` does."""
    shapes = openb_nodes(args.nodes, args.data_dir)
    manifests = trace_pods(args.pods, args.data_dir)
    with KubeCluster(base / "alone", None, disable_admission=("Priority",)) as kc:
        kc.add_gpu_nodes(shapes)
        kc.stop_scheduler()
        for m in manifests:
            kc.create_pod(m)
        bound_at: dict[str, float] = {}
        stop = threading.Event()
        threading.Thread(target=watch_bindings, args=(kc, bound_at, stop), daemon=True).start()
        time.sleep(1.0)
        kc.start_scheduler()
        t_ready = time.monotonic()
        wait_all_tried(kc, bound_at, len(manifests), t_ready, args.timeout)
        stop.set()
        last = max(bound_at.values(), default=t_ready)
        return {"bound": len(bound_at), "of": len(manifests),
                "pods_per_s": round(len(bound_at) / max(1e-9, last - t_ready), 1)}


def wait_all_tried(kc: KubeCluster, bound_at: dict[str, float], count: int, t_ready: float, timeout: float) -> None:
    """Until all ``count`` pods are bound, or kube-scheduler's active and backoff queues are empty and nothing bound
    for 3 s."""
    def settled() -> bool:
        if len(bound_at) == count:
            return True
        queues = scheduler_queues(kc)
        return queues.get("active", 1) == 0 and queues.get("backoff", 1) == 0 and time.monotonic() - max(
            bound_at.values(), default=t_ready) > 3
    wait_for("all pods tried", settled, timeout, interval_s=0.5)


def gpus_asked(pod: dict[str, Any]) -> float:
    """GPUs a pod asks for: its ``quasched.io/gpu-shares`` over 100 (0.5 = half of one GPU)."""
    return float(pod["spec"]["containers"][0]["resources"]["limits"][GPU]) / SHARES


def histogram_quantiles(text: str, name: str, match: dict[str, str], qs: tuple[float, ...]) -> dict[str, Any]:
    """Quantiles of a Prometheus histogram (summed over the series whose labels include ``match``)."""
    buckets: dict[float, float] = collections.defaultdict(float)
    count = total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        m = re.match(r"^(\w+)(?:\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        metric, labels_text, value = m.group(1), m.group(2) or "", float(m.group(3))
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels_text))
        if any(labels.get(k) != v for k, v in match.items()):
            continue
        if metric == f"{name}_bucket":
            buckets[float(labels["le"])] += value
        elif metric == f"{name}_count":
            count += value
        elif metric == f"{name}_sum":
            total += value
    out: dict[str, Any] = {"count": int(count), "mean_ms": round(1000 * total / count, 2) if count else None}
    edges = sorted(buckets)
    for q in qs:
        key = f"p{int(q * 100)}_ms"
        if not count:
            out[key] = None
            continue
        target, lo, prev = q * count, 0.0, 0.0
        for le in edges:
            c = buckets[le]
            if c >= target:
                if math.isinf(le):
                    out[key] = f">{lo * 1000:g}"
                else:
                    frac = (target - prev) / (c - prev) if c > prev else 1.0
                    out[key] = round(1000 * (lo + (le - lo) * frac), 2)
                break
            lo, prev = le, c
    return out


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system, s) each process has used so far, from /proc (0 for one that is gone)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            out[name] = 0.0
    return out


def scheduler_queues(kc: KubeCluster) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in kc.scheduler_metrics().splitlines():
        m = re.match(r'^scheduler_pending_pods\{queue="(\w+)"\}\s+(\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def run_kube(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    shapes = openb_nodes(args.nodes, args.data_dir)
    manifests = with_gangs(trace_pods(args.pods, args.data_dir), args.gangs, args.gang_size)
    q = Quasched(base / "quasched", None, policy=args.policy)
    result: dict[str, Any] = {"nodes": args.nodes, "pods": len(manifests), "policy": args.policy,
                              "gpus": sum(s.gpus for s in shapes),
                              "gpus_requested": round(sum(gpus_asked(m) for m in manifests), 2)}
    with KubeCluster(base / "k8s", q.verbs_url, disable_admission=("Priority",)) as kc:
        result["startup_s"] = round(kc.startup_s, 2)
        q.attach(kc)
        kc.add_gpu_nodes(shapes)
        q.start()
        try:
            q.ensure_queue("default")
            wait_for("quasched sees the nodes", lambda: len(
                [n for n in q.nodes() if n["name"].startswith("gpu-node-")]) == args.nodes, 60, q.proc, q.log)
            if args.gangs:
                create_groups(kc, args.gangs, args.gang_size)
            kc.stop_scheduler()
            t = time.monotonic()
            for m in manifests:
                kc.create_pod(m)
            result["create_s"] = round(time.monotonic() - t, 2)
            bound_at: dict[str, float] = {}
            names = [m["metadata"]["name"] for m in manifests]
            stop = threading.Event()  # a watch, not a list of every pod 10 times a second (API server CPU)
            watcher = threading.Thread(target=watch_bindings, args=(kc, bound_at, stop), daemon=True)
            watcher.start()
            time.sleep(1.0)
            t0 = time.monotonic()
            kc.start_scheduler()
            t_ready = time.monotonic()
            assert q.proc is not None
            pids = {name: proc.pid for name, proc in kc.procs.items()} | {"quasched": q.proc.pid}
            import os
            pids["benchmark (watch, metrics)"] = os.getpid()
            cpu_before = cpu_seconds(pids)
            wait_all_tried(kc, bound_at, len(names), t_ready, args.timeout)
            stop.set()
            cpu_after = cpu_seconds(pids)
            last = max(bound_at.values(), default=t_ready)
            result["bound"] = len(bound_at)
            result["unbound"] = len(names) - len(bound_at)
            result["scheduler_start_s"] = round(t_ready - t0, 2)
            result["schedule_s"] = round(last - t_ready, 2)
            result["pods_per_s"] = round(len(bound_at) / max(1e-9, last - t_ready), 1)
            # CPU per bound pod while scheduling (the machine's cores are shared by all of these)
            result["cpu_ms_per_pod"] = {name: round(1000 * (cpu_after[name] - cpu_before[name]) / max(1, len(bound_at)), 2)
                                        for name in pids}
            result["cpu_ms_per_pod"]["total"] = round(sum(result["cpu_ms_per_pod"].values()), 2)
            qmetrics = q.metrics()
            result["extender_ms"] = {v: histogram_quantiles(
                qmetrics, "quasched_http_request_duration_seconds", {"route": f"/k8s/scheduler/{v}"}, (0.5, 0.99))
                for v in VERBS}
            smetrics = kc.scheduler_metrics()
            result["kube_scheduler_ms"] = {
                "e2e": histogram_quantiles(smetrics, "scheduler_e2e_scheduling_duration_seconds",
                                           {"result": "scheduled"}, (0.5, 0.99)),
                "algorithm": histogram_quantiles(smetrics, "scheduler_scheduling_algorithm_duration_seconds", {},
                                                 (0.5, 0.99)),
                "binding": histogram_quantiles(smetrics, "scheduler_binding_duration_seconds", {}, (0.5, 0.99)),
            }
            ametrics = kc.api.get("/metrics").text
            result["apiserver_ms"] = {
                "get_pod": histogram_quantiles(ametrics, "apiserver_request_duration_seconds",
                                               {"verb": "GET", "resource": "pods", "subresource": ""}, (0.5, 0.99)),
                "create_binding": histogram_quantiles(ametrics, "apiserver_request_duration_seconds",
                                                      {"verb": "POST", "resource": "pods", "subresource": "binding"},
                                                      (0.5, 0.99)),
            }
            pods = kc.pods()
            if args.gangs:
                singles = [n for n in names if n.startswith("p-")]
                result["gangs"] = gang_outcome(pods, args.gangs, args.gang_size)
                result["singles_bound"] = sum(1 for n in singles if n in bound_at)
                result["singles_per_s"] = round(result["singles_bound"] / max(1e-9, last - t_ready), 1)
                result["over_commits"] = over_commits(list(pods.values()))
            placed = {}
            for n in names:
                node = (pods[n].get("spec") or {}).get("nodeName")
                if node:
                    text = (pods[n]["metadata"].get("annotations") or {}).get(DEVICES, "")
                    placed[n] = (node, tuple(int(d) for d in text.split(",") if d))
            result["_placed"] = placed
            result["_pods"] = [pods[n] for n in names]
            result["_nodes"] = kc.check(kc.api.get("/api/v1/nodes"))["items"]
            result["_node_order"] = [n["name"] for n in q.nodes()]
            jobs = [j for j in q.jobs() if (j.get("client_token") or "").startswith("k8s:") and j["state"] == "running"]
            result["quasched_running_jobs"] = len(jobs)
            mismatched = [j["name"] for j in jobs if placed.get(j["name"].split("/", 1)[1]) !=
                          (j["placement"][0]["node"], tuple(j["placement"][0]["devices"]))]
            result["kube_vs_quasched_api_mismatches"] = len(mismatched)
            result["quasched_pods_with_two_jobs"] = len(jobs) - len({j["name"] for j in jobs})
        finally:
            q.stop()
    return result


def run_own_loop(kube: dict[str, Any], policy: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The same pods, in the same order, through quasched's own loop on the same nodes."""
    from quasched.kube.convention import node_record
    from quasched.service.domain import QueueSpec
    from quasched.service.loop.controller import Controller

    records = {r.name: r for r in map(node_record, kube["_nodes"])}
    # the extender's cluster: empty at start, nodes added as its sync listed them (their order is the tie-break rank)
    ctl = Controller.rebuilt([], [QueueSpec("default")], [], own_loop_options(policy))
    for name in kube["_node_order"]:
        ctl.add_node(records[name], 0.0)
    return own_placements(ctl, kube["_pods"])


def own_loop_options(policy: str) -> Any:
    """The own loop's options: the service's policy and seed, FIFO, no preemption, one cycle per pod."""
    from quasched.policies import parse_spec
    from quasched.service.loop.state import LoopOptions

    return LoopOptions(policy=parse_spec(policy), order="fifo", preemption=False, sample_s=float("inf"))


def own_placements(ctl: Any, pods: list[dict[str, Any]]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Pod name → (node, devices) of ``pods`` submitted in order to the loop ``ctl``, one cycle each."""
    from quasched.kube.convention import job_spec

    placed: dict[str, tuple[str, tuple[int, ...]]] = {}
    names: dict[int, str] = {}
    for i, pod in enumerate(pods, start=1):
        spec = job_spec(pod)
        names[i] = pod["metadata"]["name"]
        ctl.submit(i, spec, float(i), validate=False)
        ctl.cycle(float(i))
        _, events = ctl.drain_changes()
        for e in events:
            if e.kind == "started" and e.job_id is not None:
                placed[names[e.job_id]] = (str(e.node), tuple(e.data["devices"][0]))
    return placed


def compare(kube: dict[str, Any], own: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
    kp: dict[str, tuple[str, tuple[int, ...]]] = kube["_placed"]
    model = {n["metadata"]["name"]: n["metadata"]["labels"].get("quasched.io/gpu-model", "") for n in kube["_nodes"]}
    share = {p["metadata"]["name"]: gpus_asked(p) for p in kube["_pods"]}

    def per_model(placed: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, float]:
        out: dict[str, float] = collections.defaultdict(float)
        for name, (node, _) in placed.items():
            out[model[node]] += share[name]
        return {k: round(v, 3) for k, v in sorted(out.items())}

    same_node = sum(1 for n, (node, _) in kp.items() if own.get(n, ("",))[0] == node)
    same_both = sum(1 for n, v in kp.items() if own.get(n) == v)
    return {
        "placed": {"kube": len(kp), "own_loop": len(own)},
        "same_pods_placed": set(kp) == set(own),
        "gpus_allocated": {"kube": round(sum(share[n] for n in kp), 3), "own_loop": round(sum(share[n] for n in own), 3)},
        "gpus_by_model": {"kube": per_model(kp), "own_loop": per_model(own)},
        "same_gpus_by_model": per_model(kp) == per_model(own),
        "same_node": same_node,
        "same_node_and_devices": same_both,
    }


def watch_bindings(kc: KubeCluster, bound_at: dict[str, float], stop: threading.Event) -> None:
    """Record the monotonic time each pod of the default namespace is first seen bound (a watch, re-opened)."""
    version = ""
    while not stop.is_set():
        params = {"watch": "1", "timeoutSeconds": "30"} | ({"resourceVersion": version} if version else {})
        try:
            with kc.api.stream("GET", "/api/v1/namespaces/default/pods", params=params, timeout=60) as r:
                for line in r.iter_lines():
                    if stop.is_set():
                        return
                    event = json.loads(line)
                    pod = event.get("object") or {}
                    version = (pod.get("metadata") or {}).get("resourceVersion") or version
                    if (pod.get("spec") or {}).get("nodeName"):
                        bound_at.setdefault(pod["metadata"]["name"], time.monotonic())
        except Exception as err:  # e.g. a too-old resourceVersion: watch from now on
            print(f"kube_e2e: pod watch: {err!r}; re-opened", file=sys.stderr)
            version = ""


def over_commits(pods: list[dict[str, Any]]) -> int:
    """Devices whose bound pods' shares sum above one GPU."""
    use: dict[tuple[str, str], float] = collections.defaultdict(float)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        annotations = pod["metadata"].get("annotations") or {}
        if node:
            per_device = min(1.0, gpus_asked(pod))  # whole GPUs: 1 on each device; a share: on its one device
            for d in filter(None, annotations.get(DEVICES, "").split(",")):
                use[node, d] += per_device
    return sum(1 for v in use.values() if v > 1 + 1e-9)


def run_failover(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """The pods streamed through two replicas; the leader pair killed mid-stream (module docstring)."""
    shapes = openb_nodes(args.nodes, args.data_dir)
    manifests = trace_pods(args.pods, args.data_dir)
    names = [m["metadata"]["name"] for m in manifests]
    out: dict[str, Any] = {"nodes": args.nodes, "pods": len(manifests), "rate_per_s": args.rate,
                           "kill_after": args.kill_after}
    with KubeCluster(base / "k8s", None, lone_scheduler=False, disable_admission=("Priority",)) as kc:
        pairs = Pairs(kc, base, policy=args.policy)
        try:
            kc.add_gpu_nodes(shapes)
            pairs.start(args.nodes)
            leader = pairs.leader()
            assert leader is not None
            [survivor] = [n for n in pairs.quasched if n != leader]
            versions = {n["metadata"]["name"]: n["metadata"]["resourceVersion"]
                        for n in kc.check(kc.api.get("/api/v1/nodes"))["items"]}
            bound_at: dict[str, float] = {}
            stop = threading.Event()
            watcher = threading.Thread(target=watch_bindings, args=(kc, bound_at, stop), daemon=True)
            watcher.start()
            time.sleep(1.0)
            t0 = time.monotonic()

            def stream() -> None:
                for i, m in enumerate(manifests):
                    kc.create_pod(m)
                    time.sleep(max(0.0, t0 + (i + 1) / args.rate - time.monotonic()))

            creator = threading.Thread(target=stream, daemon=True)
            creator.start()
            wait_for(f"{args.kill_after} pods bound", lambda: len(bound_at) >= args.kill_after, args.timeout,
                     interval_s=0.01)
            pairs.kill(leader)
            killed_at = time.monotonic()
            lease_at = float(wait_for("the survivor takes the Lease", lambda: pairs.leader() == survivor and
                                      time.monotonic(), 60, interval_s=0.05))
            creator.join()
            created = time.monotonic()
            wait_for("pods bound or settled", lambda: len(bound_at) == len(names) or (
                time.monotonic() - max(bound_at.values()) > 30), args.timeout, interval_s=0.5)
            stop.set()
            after = sorted(t for n, t in bound_at.items() if t > killed_at)
            before = [t for t in bound_at.values() if t <= killed_at]
            pods = list(kc.pods().values())
            q = pairs.quasched[survivor]
            jobs = {j["name"].split("/", 1)[1]: (j["placement"][0]["node"], tuple(j["placement"][0]["devices"]))
                    for j in q.jobs() if (j.get("client_token") or "").startswith("k8s:") and j["state"] == "running"}
            placed = {p["metadata"]["name"]: (p["spec"]["nodeName"], tuple(int(d) for d in filter(None, (
                p["metadata"].get("annotations") or {}).get(DEVICES, "").split(",")))) for p in pods
                if p["spec"].get("nodeName")}
            events = [e["message"] for e in kc.events() if e.get("reason") == "FailedScheduling"]
            out.update({
                "bound": len(placed), "unbound": len(names) - len(placed),
                "bound_before_kill": len(before),
                "binding_stopped_s": round(after[0] - max(before), 2) if after and before else None,
                "kill_to_next_bind_s": round(after[0] - killed_at, 2) if after else None,
                "kill_to_lease_taken_s": round(lease_at - killed_at, 2),
                "stream_s": round(created - t0, 2),
                "last_bind_after_stream_s": round(max(bound_at.values()) - created, 2),
                "survivor_pods_per_s": round(len(after) / max(1e-9, after[-1] - after[0]), 1) if len(after) > 1 else None,
                "devices_over_committed": over_commits(pods),
                "survivor_books_vs_bindings_mismatches": sum(1 for n, v in placed.items() if jobs.get(n) != v)
                + sum(1 for n in jobs if n not in placed),
                "failed_scheduling_events": len(events),
                "failed_scheduling_not_quasched_reasons": [m for m in events if "quasched:" not in m][:5],
                "nodes_modified": sum(1 for n in kc.check(kc.api.get("/api/v1/nodes"))["items"]
                                      if versions.get(n["metadata"]["name"]) != n["metadata"]["resourceVersion"]),
            })
        finally:
            pairs.stop()
    return out


class RecordingApi:
    """The API-server calls of bind, on the benchmark's own pods (no API server: the in-process mode)."""

    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.pods[name]

    def bind_pod(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        self.pods[name]["spec"]["nodeName"] = node
        self.pods[name]["metadata"].setdefault("annotations", {}).update(annotations or {})


def run_in_process(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """filter (the decision) and bind called on the extender's Bridge directly, as kube-scheduler would with
    ``nodeCacheCapable`` (node names only), on ``--nodes`` openb nodes; per-call latency quantiles."""
    from quasched.kube import wire
    from quasched.kube.convention import devices_of
    from quasched.kube.extender import KubeOptions
    from quasched.kube.mount import extender
    from quasched.model.nodes import NodeSpec
    from quasched.policies import parse_spec
    from quasched.service.api.app import create_app
    from quasched.service.domain import QueueSpec
    from quasched.service.loop.controller import Controller
    from quasched.service.loop.state import LoopOptions

    shapes = openb_nodes(args.nodes, args.data_dir)
    manifests = trace_pods(args.pods, args.data_dir)
    pods = {m["metadata"]["name"]: m for m in manifests}
    for i, m in enumerate(manifests):
        m["metadata"]["uid"] = f"uid-{i:06d}"
    cluster = NodeSpec(name=np.array([s.name for s in shapes], dtype=object),
                       cpu_milli=np.array([s.cpu_milli for s in shapes], dtype=np.int64),
                       memory_mib=np.array([s.memory_mib for s in shapes], dtype=np.int64),
                       num_gpus=np.array([s.gpus for s in shapes], dtype=np.int64),
                       gpu_model=np.array([s.model for s in shapes], dtype=object))
    app = create_app(f"sqlite:///{base / 'quasched.db'}", cluster, options=LoopOptions(policy=parse_spec(args.policy)),
                     extensions=[extender(KubeOptions(client=RecordingApi(pods)))])
    bridge = app.state.kube
    names = [s.name for s in shapes]
    times: dict[str, list[float]] = {"filter": [], "bind": []}
    bound = 0
    for m in manifests:
        body = json.dumps({"Pod": m, "Nodes": None, "NodeNames": names}).encode()
        t0 = time.perf_counter()
        passed = bridge.filter(wire.parse(body))["NodeNames"]  # parsing the body included, as over HTTP
        t1 = time.perf_counter()
        times["filter"].append(t1 - t0)
        if not passed:
            continue
        meta = m["metadata"]
        reply = bridge.bind({"PodName": meta["name"], "PodNamespace": meta.get("namespace", "default"),
                             "PodUID": meta["uid"], "Node": passed[0]})
        times["bind"].append(time.perf_counter() - t1)
        bound += not reply["Error"]
    placed = {name: (p["spec"]["nodeName"], devices_of(p) or ()) for name, p in pods.items() if p["spec"].get("nodeName")}
    own = own_placements(Controller(cluster, [QueueSpec("default")], own_loop_options(args.policy)), manifests)
    out: dict[str, Any] = {"mode": "in-process", "nodes": args.nodes, "pods": len(manifests), "policy": args.policy,
                           "bound": bound, "placed": {"kube": len(placed), "own_loop": len(own)},
                           "same_node_and_devices": sum(own.get(n) == v for n, v in placed.items()),
                           "placements_equal_own_loop": placed == own}
    for verb, ts in times.items():
        ms = 1000 * np.asarray(ts or [0.0])
        out[f"{verb}_ms"] = {"p50": round(float(np.percentile(ms, 50)), 2),
                             "p99": round(float(np.percentile(ms, 99)), 2), "mean": round(float(ms.mean()), 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--data-dir", default=None, help="traces folder (default $QUASCHED_DATA)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    ap.add_argument("--in-process", action="store_true",
                    help="no cluster: time filter (the decision) and bind on the extender's Bridge directly")
    ap.add_argument("--failover", action="store_true", help="two replicas; kill -9 the leader pair mid-stream")
    ap.add_argument("--rate", type=float, default=40.0, help="with --failover: pods created per second")
    ap.add_argument("--kill-after", type=int, default=300, help="with --failover: kill once this many are bound")
    ap.add_argument("--gangs", type=int, default=0, help="pod groups spread among the pods (all or nothing)")
    ap.add_argument("--gang-size", type=int, default=4, help="pods per group (minMember), 2 GPUs each")
    ap.add_argument("--alone", action="store_true",
                    help="with --gangs: also the single pods through kube-scheduler alone, in the same harness")
    args = ap.parse_args()
    if not args.in_process:  # the extender's Kubernetes client
        require_or_exit("kube", "kubernetes")
    reason = None if args.in_process else missing() or (replicas_missing() if args.failover else None)
    if reason:
        print(f"kube_e2e: {reason}", file=sys.stderr)
        return 2
    import os
    args.data_dir = args.data_dir or os.environ.get("QUASCHED_DATA") or str(
        Path(__file__).resolve().parents[2] / "shared/traces")
    tmp = tempfile.mkdtemp(prefix="quasched-kube-bench-")
    if args.failover or args.in_process:
        out = run_failover(args, Path(tmp)) if args.failover else run_in_process(args, Path(tmp))
    else:
        kube = run_kube(args, Path(tmp))
        if not args.gangs:  # (the own loop places no pod groups of Kubernetes)
            kube["placement_quality"] = compare(kube, run_own_loop(kube, args.policy))
        out = {k: v for k, v in kube.items() if not k.startswith("_")}
        if args.alone:
            out["kube_scheduler_alone"] = run_alone(args, Path(tmp))
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.keep:
        print(f"work directory: {tmp}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
