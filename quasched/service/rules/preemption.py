"""Which running jobs a waiting job may stop, and where (the victim search of the loop).

Victim order: jobs of queues that borrow first (the queue borrowing most
first), then lowest priority, then the largest (fewest victims free the
room), then the most recently started (least work lost). Per node the set
is minimised as kube-scheduler's DefaultPreemption does: remove every
candidate, check the pod fits, then reprieve candidates from the least
preferred on while it still fits. The node needing the fewest victims wins.
Every search leaves the cluster exactly as it found it.
"""

from __future__ import annotations

from typing import Collection, Iterable, Sequence

import numpy as np

from quasched.model.cluster import Cluster, Placement
from quasched.model.fit import Demand, fit_matrix
from quasched.model.nodes import accessible
from quasched.model.workload import Pod
from quasched.policies.devices import best_fit
from quasched.service.domain import MAX_GANG, Job
from quasched.service.rules.quota import QuotaBook


def fits_on(cluster: Cluster, pod: Pod, node: int) -> bool:
    """Whether ``pod`` fits on ``node`` as the cluster stands (the one fit rule)."""
    return bool(fit_matrix(cluster, Demand.of([pod]), np.array([node]))[0, 0])


def first_fit(cluster: Cluster, pod: Pod, among: Collection[int] | None = None) -> int | None:
    """The first schedulable node (of ``among``, if given) ``pod`` fits on now (None if none)."""
    nodes = np.flatnonzero(cluster.schedulable & cluster.spec_mask(pod.gpu_model))
    if among is not None:
        nodes = nodes[np.isin(nodes, np.fromiter(among, dtype=np.int64))]
    fit = fit_matrix(cluster, Demand.of([pod]), nodes)[0] if len(nodes) else nodes
    return int(nodes[np.argmax(fit)]) if fit.any() else None


def reclaims(quota: QuotaBook, models: Iterable[str], team: str, milli: int, gpu_model: str) -> bool:
    """Whether ``team`` asking ``milli`` milli-GPU in all (what it waits for) stays within its nominal quota of some
    model its pods may use: then it may reclaim what the queues of its cohort borrow."""
    return milli > 0 and any(quota.within_nominal(team, m, milli) for m in models if m and accessible(m, gpu_model))


def victim_order(quota: QuotaBook, running: Iterable[Job], team: str, priority: int, reclaim: bool,
                 lowest: int | None = None) -> list[Job]:
    """Running jobs a waiting job of queue ``team`` and ``priority`` may stop (lower priority; with ``reclaim``, any
    job of a borrowing cohort queue), most preferred victim first. ``lowest``: no running job has a lower priority
    (then, unless a cohort queue can be reclaimed from, ``running`` is not scanned: none is a victim)."""
    lent = {q: quota.borrowed(q) for q in quota.cohort(team) if q != team}
    borrowing = {q for q, milli in lent.items() if milli > 0}
    if lowest is not None and lowest >= priority and not (reclaim and borrowing):
        return []
    out = [v for v in running if v.priority < priority or (reclaim and v.spec.team in borrowing)]
    return sorted(out, key=lambda v: (v.spec.team not in borrowing, -lent.get(v.spec.team, 0), v.priority,
                                      -v.gpu_total, -(v.started_at or 0.0), -v.id))


def put_back(cluster: Cluster, placement: Placement) -> Placement:
    """Bind again a pod the search took off: it ran there, so only its devices are checked (a gang victim's
    other nodes may have been cordoned since it started; a running pod stays on a cordoned node)."""
    return cluster.place(placement.pod, placement.node, placement.devices,
                         filtered_at=int(cluster.version[placement.node]))


def cheapest_node(cluster: Cluster, pod: Pod, victims: list[Job], max_nodes: int = 64,
                  among: Collection[int] | None = None) -> tuple[int, list[Job]] | None:
    """The node (of ``among``, if given) needing the fewest of ``victims`` (in victim order) for ``pod``, and those
    victims."""
    c = cluster
    on: dict[int, dict[int, Job]] = {}
    for v in victims:
        for name, _ in v.placement:
            node = c.node(name)
            if among is None or node in among:
                on.setdefault(node, {})[v.id] = v
    best: tuple[int, list[Job]] | None = None
    for node in sorted(on, key=lambda n: (-len(on[n]), n))[:max_nodes]:
        if not (c.schedulable[node] and accessible(str(c.models[c.model_id[node]]), pod.gpu_model)):
            continue
        candidates = list(on[node].values())
        removed = {v.id: [c.remove(v.id * MAX_GANG + k) for k in range(v.spec.pods)] for v in candidates}
        chosen: list[Job] = []
        if fits_on(c, pod, node):
            for v in reversed(candidates):  # reprieve, least preferred victim first
                back = [put_back(c, p) for p in removed.pop(v.id)]
                if not fits_on(c, pod, node):
                    for p in back:
                        c.remove(p.pod)
                    removed[v.id] = back
                    chosen.append(v)
        for placements in removed.values():
            for p in placements:
                put_back(c, p)
        if chosen and (best is None or len(chosen) < len(best[1])):
            best = (node, chosen[::-1])
    return best


def room_after(cluster: Cluster, stopping: Sequence[Job], waiting: Sequence[Pod], pod: Pod,
               among: Collection[int] | None = None) -> bool:
    """Whether ``pod`` fits (on a node of ``among``, if given) once the ``stopping`` jobs are gone and the ``waiting``
    pods (those that chose them, in order) took their room. The cluster is left exactly as it was."""
    c = cluster
    freed = [c.remove(v.id * MAX_GANG + k) for v in stopping for k in range(v.spec.pods)]
    taken = []
    try:
        for claim in waiting:
            node = first_fit(c, claim)
            if node is not None:
                taken.append(c.place(claim, node, best_fit(c.gpu_free[node], claim)))
        return first_fit(c, pod, among) is not None
    finally:
        for placement in taken:
            c.remove(placement.pod)
        for placement in freed:
            put_back(c, placement)
