"""A member as the dispatch rules see it (:class:`~quasched.federation.loop.Site`): a mirror of its nodes.

The mirror is a :class:`~quasched.model.cluster.Cluster` of the member's nodes, rebuilt in place from each reading of
``GET /nodes``: what the member reports in use on each node and device is held by placeholder pods, and the jobs the
front sent that the member does not show on a node yet are *assumed* on top (as kube-scheduler assumes a pod between
its decision and the bind). Whether a job starts now is the mirror's scheduler's answer, with the member's nodes as
they were last read; the member then places it for real (it may queue it: the front reads that back).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from quasched.front.members import Member, MemberError
from quasched.metrics.typical import TypicalPods, TypicalWindow
from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec
from quasched.model.random import NumpyStream
from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies import Scheduler, make_policy
from quasched.sim.engine import node_ranks

#: placeholder pods' uids start here and go down (the front's jobs have uids >= 0)
BUSY_UID = -1


def node_spec(nodes: list[dict[str, Any]], member: str) -> NodeSpec:
    """The nodes of a ``GET /nodes`` answer as a :class:`NodeSpec`; :class:`MemberError` on a malformed entry."""
    try:
        return NodeSpec(np.array([str(n["name"]) for n in nodes], dtype=object),
                        np.array([int(n["cpu_milli"]) for n in nodes], dtype=np.int64),
                        np.array([int(n["memory_mib"]) for n in nodes], dtype=np.int64),
                        np.array([int(n["num_gpus"]) for n in nodes], dtype=np.int64),
                        np.array([str(n["gpu_model"]) for n in nodes], dtype=object), source=f"member {member}")
    except (KeyError, TypeError, ValueError) as err:
        raise MemberError(f"member {member}: GET /nodes: a node without a valid {err}") from None


class RemoteSite:
    """One member: its client, its mirror (module docstring), whether it is up, and the jobs assumed on it.

    ``send(job)`` submits the front's job ``job`` to the member and returns the state the member gave it (None: the
    member could not be reached or refused it)."""

    def __init__(self, member: Member, nodes: list[dict[str, Any]], policy: str, seed: int,
                 typical: TypicalPods | TypicalWindow, send: Callable[[int], str | None]) -> None:
        self.member, self.send = member, send
        spec, rng = node_spec(nodes, member.name), NumpyStream(seed)
        rank = node_ranks(spec, rng)
        self.cluster = Cluster(spec)
        self.scheduler = Scheduler(self.cluster, make_policy(policy, typical), rank, rng)  # as serve's loop builds it
        self.names = [str(n["name"]) for n in nodes]
        self.assumed: dict[int, Pod] = {}
        self.busy: list[int] = []
        self.queued: set[int] = set()  # sent by place, taken into the member's queue
        self.up, self.error = True, ""
        self.down_since: float | None = None
        self.used = np.zeros(2)  # GPU and CPU milli in use at the last reading
        self.read(nodes, set())

    def place(self, pod: Pod, now: float) -> bool:
        if not self.up or not self.scheduler.schedule(pod).placed:
            return False
        state = self.send(pod.uid)
        if state != "running":  # refused, or taken into the member's queue (it waits there: no second send)
            self.cluster.remove(pod)
            if state is not None:
                self.queued.add(pod.uid)
            return False
        self.assumed[pod.uid] = pod
        return True

    def wait(self, pod: Pod, now: float) -> None:
        if pod.uid in self.queued:
            self.queued.discard(pod.uid)
        else:
            self.send(pod.uid)  # a refusal marks the member down; the front decides the job again

    def reset(self) -> None:
        """Forget the front's jobs (the front rebuilds its plan: its jobs' indexes change); the next :meth:`read`
        holds what the member reports."""
        for job in list(self.assumed):
            self.forget(job)
        self.queued.clear()

    def forget(self, job: int) -> None:
        """``job`` ended, or the member shows it on a node (its use is then in the member's reading)."""
        if self.assumed.pop(job, None) is not None and job in self.cluster.placements:
            self.cluster.remove(job)

    def read(self, nodes: list[dict[str, Any]], confirmed: set[int]) -> None:
        """Rebuild the mirror from a ``GET /nodes`` answer; ``confirmed``: the front's jobs it shows on a node (no
        longer assumed). A node set that changed is said in :attr:`error` (the mirror keeps the nodes it has)."""
        for job in confirmed:
            self.forget(job)
        for placed in list(self.cluster.placements.values()):
            self.cluster.remove(placed.pod)
        self.busy.clear()
        names = [str(n.get("name")) for n in nodes]
        self.error = "" if names == self.names else "its nodes changed since the front started: restart the front"
        self.used[:] = 0
        for n in nodes:
            if str(n.get("name")) in self.names:
                self._hold(self.cluster.node(str(n["name"])), n)
        for pod in list(self.assumed.values()):
            if not self.scheduler.schedule(pod).placed:
                del self.assumed[pod.uid]  # no longer fits the member's nodes as read: it waits there
        self.used += [sum(p.gpu_request for p in self.assumed.values()), sum(p.cpu_milli for p in self.assumed.values())]

    def _hold(self, node: int, entry: dict[str, Any]) -> None:
        """Placeholder pods for what ``entry`` (one node of ``GET /nodes``) reports in use."""
        if bool(entry.get("cordoned")) != bool(self.cluster.cordoned[node]):
            (self.cluster.cordon if entry.get("cordoned") else self.cluster.uncordon)(node)
        for device, healthy in enumerate(entry.get("gpu_healthy", [])[:int(self.cluster.num_gpus[node])]):
            if bool(self.cluster.gpu_healthy[node, device]) != bool(healthy):
                self.cluster.set_device_health(node, device, bool(healthy))
        cpu, memory = int(entry.get("cpu_used_milli", 0)), int(entry.get("memory_used_mib", 0))
        if cpu or memory:
            self._busy(node, (), cpu_milli=cpu, memory_mib=memory)
        gpus = [min(int(m), FULL_GPU_MILLI) for m in entry.get("gpu_used_milli", [])][:int(self.cluster.num_gpus[node])]
        for device, milli in enumerate(gpus):
            if milli > 0:
                self._busy(node, (device,), cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=milli)
        self.used += [sum(gpus), cpu]

    def _busy(self, node: int, devices: tuple[int, ...], cpu_milli: int, memory_mib: int, num_gpu: int = 0,
              gpu_milli: int = 0) -> None:
        """A placeholder pod holding what is in use on ``node``'s ``devices`` (a reading above capacity: all of it)."""
        free = self.cluster.free[node]
        pod = Pod(BUSY_UID - len(self.busy), "in use", cpu_milli=min(cpu_milli, int(free[CPU])),
                  memory_mib=min(memory_mib, int(free[MEMORY])), num_gpu=num_gpu, gpu_milli=gpu_milli)
        self.cluster.place(pod, node, devices)
        self.busy.append(pod.uid)

    def down(self, error: MemberError, now: float) -> None:
        """The member did not answer at ``now`` (:attr:`down_since`: since when, while it stays away)."""
        if self.up:
            self.down_since = now
        self.up, self.error = False, str(error)
