"""Assumed placements: a pod's devices taken in the loop's cluster on a decision not yet made durable
(kube-scheduler's *assumed pod*, Kueue's workload assumed in its cache before the API write).

An :class:`Assumption` occupies its node and devices and is charged to its queue's quota, so every
later decision sees them taken, but it is never a :class:`~quasched.service.domain.Job`: it is not among the loop's
jobs, never a preemption victim or a migration, never stored and never in the changes the loop
hands out. It ends in one of four ways: forgotten by whoever assumed it, confirmed (a stored job
takes exactly its node and devices, :meth:`~.controller.Controller.confirm`), expired after its
TTL, or lost with its node or a failed device under it (reported to ``on_lost`` with its key, not
requeued). Its pod uids are negative, a space the loop's jobs (``job.id * MAX_GANG + k``, ids from
the store) never use."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from quasched.model.cluster import Cluster, PlacementError
from quasched.model.workload import Pod
from quasched.service.rules.quota import QuotaBook


@dataclass
class Assumption:
    """``pod`` (its uid in the assumption space) on ``node`` (slot ``slot``) with ``devices`` until ``expires``."""

    key: str
    pod: Pod
    node: str
    slot: int
    devices: tuple[int, ...]
    model: str
    expires: float
    on_lost: Callable[[str], None] | None = None


class Assumptions:
    """The assumed placements of one loop, by key, on its cluster and quota book (module docstring)."""

    def __init__(self, cluster: Cluster, quota: QuotaBook) -> None:
        self.cluster = cluster
        self.quota = quota
        self._by_key: dict[str, Assumption] = {}
        self._last_uid = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Assumption]:
        return iter(list(self._by_key.values()))

    def get(self, key: str) -> Assumption | None:
        """The assumption ``key``, if any."""
        return self._by_key.get(key)

    @staticmethod
    def owns(uid: int) -> bool:
        """Whether the cluster's pod ``uid`` is an assumption's (not a job's): the uid space says it."""
        return uid < 0

    def assume(self, key: str, pod: Pod, node: str, devices: tuple[int, ...], ttl_s: float, now: float,
               on_lost: Callable[[str], None] | None = None) -> Assumption | None:
        """Take ``devices`` of ``node`` for ``pod`` under ``key`` (an earlier assumption of ``key`` is forgotten
        first) until ``now + ttl_s``; None (nothing taken) if the fit rule refuses them."""
        self.forget(key)
        c = self.cluster
        try:
            slot = c.node(node)
            placed = c.place(replace(pod, uid=self._last_uid - 1), slot, devices)
        except PlacementError:
            return None
        self._last_uid -= 1
        model = str(c.models[c.model_id[slot]])
        self.quota.charge(pod.team, model, pod.gpu_request)
        held = Assumption(key, placed.pod, node, slot, placed.devices, model, now + ttl_s, on_lost)
        self._by_key[key] = held
        return held

    def forget(self, key: str) -> Assumption | None:
        """End assumption ``key``: exactly what it took is free again (None if there was none)."""
        held = self._by_key.pop(key, None)
        if held is not None:
            self.cluster.remove(held.pod.uid)
            self.quota.charge(held.pod.team, held.model, -held.pod.gpu_request)
        return held

    def binding(self, key: str) -> bool:
        """A bind of assumption ``key`` is under way: it no longer expires (as kube-scheduler counts an assumed
        pod's TTL only once its binding finished); False if there is none."""
        held = self._by_key.get(key)
        if held is not None:
            held.expires = math.inf
        return held is not None

    def expire(self, now: float) -> list[str]:
        """Forget the assumptions whose TTL ran out by ``now``, reporting each; their keys."""
        return self._lose([a for a in self._by_key.values() if a.expires <= now])

    def lose_on(self, slot: int, device: int | None = None) -> list[str]:
        """Forget the assumptions on node slot ``slot`` (with ``device``: those using it), reporting each; their keys."""
        return self._lose([a for a in self._by_key.values()
                           if a.slot == slot and (device is None or device in a.devices)])

    def _lose(self, lost: list[Assumption]) -> list[str]:
        for held in lost:
            self.forget(held.key)
            if held.on_lost is not None:
                held.on_lost(held.key)
        return [held.key for held in lost]
