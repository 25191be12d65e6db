"""End to end: a front with a ``quasched serve`` member and a Kubernetes member, the latter a real kube-apiserver +
kube-scheduler v1.20.2 with ``quasched serve --kube-extender`` as its extender (tests/kube_cluster.py), and, where
this machine can run one, a real kubelet node with quasched's device plugin (tests/kube_node.py).

The Kubernetes member's zone is the greener: the job goes there as a pod with ``schedulerName: quasched`` and
``quasched.io/gpu-shares``, kube-scheduler binds it through quasched (its ``quasched.io/gpu-devices`` annotation and
a running job in quasched's books), the member's nodes read back show it; a repeated submit with the same client
token creates no second pod; a pod bound to a node with no kubelet stays pending at the front (bound is not
running); cancelling deletes it. A gang is a PodGroup and its pods, bound together. On the kubelet's node, the
pods run: the front mirrors running, then succeeded or failed with the container's exit code and times, and bills
the run. Gated like the other Kubernetes end-to-end tests (``QUASCHED_K8S_E2E``; docs/kubernetes-e2e.md).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator

import kube_cluster
import kube_node
import pytest
import yaml
from api_support import live_server, make_app
from kube_cluster import DEVICES, KubeCluster, NodeShape, Quasched, wait_for
from test_front import Scripted, spec

from quasched.front.front import ENDED, Front, Zone, job_body
from quasched.front.kubemember import JOB_LABEL, TOKEN_ANNOTATION, KubeMember
from quasched.front.members import KubeMemberConfig, MemberConfig, ServeMember
from quasched.front.store import FrontStore
from quasched.service.domain import JobState

MODE = os.environ.get("QUASCHED_K8S_E2E", "auto")
REASON = "QUASCHED_K8S_E2E=off" if MODE == "off" else kube_cluster.missing()
if REASON and MODE == "require":
    raise RuntimeError(f"QUASCHED_K8S_E2E=require but {REASON}")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]  # a real control plane

REPO = Path(__file__).parents[2]
NODES = [NodeShape(f"a100-{i}", 64_000, 512 * 1024, 8, "A100") for i in range(2)]
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
KUBELET_NODE, KUBELET_GPUS, KUBELET_MODEL = "front-kubelet-0", 2, "T4"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeCluster, Quasched]]:
    base = tmp_path_factory.mktemp("front-kube")
    q = Quasched(base / "quasched", None)
    with KubeCluster(base / "k8s", q.verbs_url) as kc:
        q.attach(kc)
        crd = yaml.safe_load((REPO / "deploy" / "podgroup-crd.yaml").read_text())
        kc.check(kc.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd))
        wait_for("the PodGroup CRD is served", lambda: kc.api.get(PODGROUPS).status_code == 200, 60)
        kc.add_gpu_nodes(NODES)
        q.start()
        try:
            q.ensure_queue("default")
            wait_for("quasched sees the nodes", lambda: {n["name"] for n in q.nodes()} >= {s.name for s in NODES},
                     60, q.proc, q.log)
            yield kc, q
        finally:
            q.stop()


@contextlib.contextmanager
def federation(tmp: Path, kc: KubeCluster) -> Iterator[Front]:
    """A front (wall clock, greedy) over a serve member in zone A (400 g/kWh) and the Kubernetes member in zone B
    (100 g/kWh)."""
    home = tmp / "serve"
    home.mkdir()
    app, _ = make_app(home, clock=time.time)
    with live_server(app) as url:
        serve = MemberConfig(name="serve", url=url, zone="A", token_file=home / "quasched.token")
        kube = KubeMemberConfig(name="kube", kind="kubernetes", kubeconfig=kc.kubeconfig, zone="B",
                                namespace="default", image=kube_node.IMAGE,
                                pod_spec={"hostNetwork": True, "terminationGracePeriodSeconds": 0})
        zones = [Zone(Scripted("A", lambda h: 400.0), 1.0), Zone(Scripted("B", lambda h: 100.0), 1.0)]
        front = Front(FrontStore(f"sqlite:///{tmp / 'front.db'}"), [ServeMember(serve), KubeMember(kube)], zones,
                      "greedy", clock=time.time, read_s=0.0)
        front.lead()
        try:
            yield front
        finally:
            front.stop()


def front_pods(kc: KubeCluster) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in kc.pods().items() if JOB_LABEL in (p["metadata"].get("labels") or {})}


def sent(front: Front, job_id: int) -> tuple[str, str]:
    dispatch = front.dispatch_of[front.index[job_id]]
    assert dispatch.remote is not None, dispatch
    return dispatch.member, dispatch.remote


def quasched_running(q: Quasched, name: str) -> list[dict[str, Any]]:
    return [j for j in q.jobs() if j["name"] == f"default/{name}" and j["state"] == "running"]


def test_a_job_goes_to_the_greener_kubernetes_member_bound_by_quasched_once(stack, tmp_path: Path) -> None:
    kc, q = stack
    with federation(tmp_path, kc) as front:
        now = time.time()
        job, _ = front.submit(spec(name="to-kube", gpus=1), now + 7200, 3600.0, now)
        front.step()
        member, remote = sent(front, job.id)
        assert member == "kube" and remote.startswith("default/front-")
        name = remote.split("/", 1)[1]
        pod = kc.pod(name)
        assert pod["spec"]["schedulerName"] == "quasched" and pod["spec"]["restartPolicy"] == "Never"
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"quasched.io/gpu-shares": "100"}
        assert pod["metadata"]["annotations"][TOKEN_ANNOTATION] == f"front-{job.id}"
        # bound by kube-scheduler through quasched: its devices annotation and a running job in quasched's books
        pod = kc.wait_bound([name], timeout_s=60)[name]
        node = pod["spec"]["nodeName"]
        assert node in {s.name for s in NODES} and pod["metadata"]["annotations"].get(DEVICES)
        [booked] = wait_for("quasched books the pod", lambda: quasched_running(q, name), 30)
        assert [p["node"] for p in booked["placement"]] == [node]
        # the member's nodes read back carry it; the front still has it pending (bound: no kubelet started it)
        kube = front.sites[1].member
        entry = next(n for n in wait_for("the pod on its node", lambda: [
            n for n in kube.nodes() if remote in n["jobs"]], 30))
        device = int(pod["metadata"]["annotations"][DEVICES])
        assert entry["name"] == node and entry["gpu_used_milli"][device] == 1000
        assert entry["cpu_used_milli"] == 4000 and entry["memory_used_mib"] == 16 * 1024
        front.step()
        assert front.jobs[front.index[job.id]].state == JobState.PENDING
        assert front.sites[1].up and front.sites[1].error == ""  # read as the same nodes each round
        assert kube.job(remote)["state"] == "pending"
        # a repeat after a crash (same client token) finds the pod: no second one
        again = kube.submit(job_body(job.spec, f"front-{job.id}"))
        assert again["id"] == remote
        assert [n for n in front_pods(kc)] == [name]
        # the front's serve member got nothing
        assert front.sites[0].member.nodes() and all(not n["jobs"] for n in front.sites[0].member.nodes())
        # cancelled: the pod is deleted, quasched's job for it ends
        cancelled = front.cancel(job.id)
        assert cancelled.state == JobState.CANCELLED
        wait_for("the pod deleted", lambda: name not in kc.pods(), 30)
        wait_for("quasched's job ends", lambda: not quasched_running(q, name), 30)
        assert kube.job(remote)["state"] == "cancelled"


def test_a_gang_is_a_podgroup_bound_together_and_cancelled_whole(stack, tmp_path: Path) -> None:
    kc, q = stack
    with federation(tmp_path, kc) as front:
        now = time.time()
        job, _ = front.submit(spec(name="gang", gpus=8, pods=2), now + 7200, 3600.0, now)
        front.step()
        member, remote = sent(front, job.id)
        name = remote.split("/", 1)[1].split("[")[0]
        assert member == "kube" and remote.endswith("[2]")
        group = kc.check(kc.api.get(f"{PODGROUPS}/{name}"))
        assert group["spec"]["minMember"] == 2
        pods = kc.wait_bound([f"{name}-0", f"{name}-1"], timeout_s=60)
        assert {p["spec"]["nodeName"] for p in pods.values()} == {s.name for s in NODES}  # 8 GPUs each: one a node
        kube = front.sites[1].member
        assert kube.job(remote)["state"] == "pending"
        on_nodes = wait_for("both on the member's nodes", lambda: [
            n for n in kube.nodes() if remote in n["jobs"] and sum(n["gpu_used_milli"]) == 8000], 30)
        assert len(on_nodes) == 2
        assert kube.submit(job_body(job.spec, f"front-{job.id}"))["id"] == remote
        assert len(front_pods(kc)) == 2
        front.cancel(job.id)
        wait_for("the gang's pods deleted", lambda: not front_pods(kc), 30)
        assert kc.api.get(f"{PODGROUPS}/{name}").status_code == 404
        wait_for("quasched's jobs end", lambda: not any(quasched_running(q, f"{name}-{i}") for i in range(2)), 30)


@pytest.fixture(scope="module")
def kubelet(stack) -> Iterator[tuple[KubeCluster, Quasched, kube_node.KubeletNode]]:
    why = kube_node.missing()
    if why:
        if MODE == "require":
            raise RuntimeError(f"QUASCHED_K8S_E2E=require but {why}")
        pytest.skip(why)
    kc, q = stack
    with kube_node.KubeletNode(kc, Path(kc.dir).parent / "node", KUBELET_NODE, KUBELET_GPUS, KUBELET_MODEL) as kn:
        wait_for("quasched sees the kubelet's node with its GPUs", lambda: any(
            n["name"] == KUBELET_NODE and n["num_gpus"] == KUBELET_GPUS for n in q.nodes()), 60, q.proc, q.log)
        yield kc, q, kn


def test_on_a_real_kubelet_the_front_mirrors_the_pods_run_and_exit(kubelet, tmp_path: Path) -> None:
    kc, q, kn = kubelet
    with federation(tmp_path, kc) as front:
        now = time.time()
        jobs = {}
        for name, code in (("ok", 0), ("bad", 3)):
            job_spec = spec(name=name, gpus=1, gpu_model=KUBELET_MODEL, cpu=0.1, memory="16MiB", duration=None,
                            command=["/bin/sh", "-c", f"sleep 3; exit {code}"], time_limit=120)
            jobs[name], _ = front.submit(job_spec, now + 7200, 60.0, now)
        seen: dict[str, set[JobState]] = {name: set() for name in jobs}

        def ended() -> bool:
            front.step()
            for name, job in jobs.items():
                seen[name].add(front.jobs[front.index[job.id]].state)
            return all(front.jobs[front.index[j.id]].state in ENDED for j in jobs.values())

        try:
            wait_for("the pods run and end", ended, 120, interval_s=0.3)
        except TimeoutError as err:
            where = {n: (front.dispatch_of[front.index[j.id]].member, front.dispatch_of[front.index[j.id]].remote,
                         front.dispatch_of[front.index[j.id]].why) for n, j in jobs.items()}
            pods = {n: (p["spec"].get("nodeName"), p.get("status")) for n, p in front_pods(kc).items()}
            raise TimeoutError(f"{err} {seen} {where} {pods}{kn.log_tail('kubelet')}") from None
        for name, code, state in (("ok", 0, JobState.SUCCEEDED), ("bad", 3, JobState.FAILED)):
            job = front.jobs[front.index[jobs[name].id]]
            dispatch = front.dispatch_of[front.index[job.id]]
            assert dispatch.member == "kube"
            assert JobState.RUNNING in seen[name], seen
            assert (job.state, job.exit_code) == (state, code)
            assert job.started_at is not None and job.finished_at is not None
            assert 2.5 <= job.finished_at - job.started_at <= 30  # the container's own start and end (sleep 3)
            assert dispatch.kwh is not None and dispatch.kwh > 0 and dispatch.kg is not None
            pod = kc.pod(dispatch.remote.split("/", 1)[1])
            assert pod["spec"]["nodeName"] == KUBELET_NODE and pod["metadata"]["annotations"].get(DEVICES)
