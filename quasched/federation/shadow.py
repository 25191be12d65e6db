"""Ours with node-level EASY backfilling (``carbon-aware-shadow``, ``ours-displace-shadow``; Lifka 1995,
Mu'alem & Feitelson 2001).

The slack-based guard of :mod:`.backfill` protects the head of a queue up to its latest start, because it
does not ask when a node frees room for the head. The engine knows: every running pod's node, devices and end
(placement + known duration). So the head ``h`` of cluster ``c``'s queue gets a *reservation*: on scratch copies
of the nodes' rows, release the running pods of ``c`` in order of their end until a node holds ``h``::

    S        = min { end[p] : after releasing every pod ending by end[p], some node holds h }  (shadow time)
    shadow   = { nodes that hold h at S }          free_S, gpu_free_S, app_S: those nodes' rows at S

An inflexible job ``j`` (one start: now, end ``e_j``) may pass the queue of ``c`` (the backfilling of
:class:`~.backfill.Backfilling`) if::

    e_j <= S   or   |shadow| >= 2   or   j fits no shadow node now   or   h still fits its one shadow node at S
    with j there (scalars: free_S - q_j >= q_h; devices: worst case over the ones j may take; same app: app_S + 1)

(``j`` runs on one node, so two shadow nodes keep one for ``h``). The test is exact for the passing job and never
moves ``S`` later. A head that no release lets fit (never placeable) blocks nothing. Reservations are computed
only when a pass is asked and kept per cluster until the cluster or its head changes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from quasched.federation.backfill import BackfillDisplacement, BackfillRule, Backfilling
from quasched.federation.dispatch import View
from quasched.model.cluster import Cluster
from quasched.model.fit import fit_mask
from quasched.model.workload import Pod


class Reservation(NamedTuple):
    """The head's shadow time ``time`` (infinite: never), its shadow ``nodes`` and their rows at that time."""

    time: float
    nodes: list[int]
    free: list[np.ndarray]
    gpu_free: list[np.ndarray]
    apps: list[np.ndarray]


def holds(cluster: Cluster, pod: Pod, node: int, free: np.ndarray, gpu_free: np.ndarray, apps: np.ndarray) -> bool:
    """Does ``node`` of ``cluster`` hold ``pod`` given its rows ``free``, ``gpu_free`` and ``apps`` (the fit rule of
    :func:`~quasched.model.fit.fit_checks` on one node).

    Not ``fit_checks`` itself over supplied rows: it is vectorised over nodes and reads the cluster's live arrays
    (with the derived ``gpu_free_max``), so a scratch row would need a cluster-shaped state object and a ``Demand`` per
    call, in the reservation's inner loop; one live node through ``fit_matrix`` alone already costs 4× this function
    (57 vs 14.5 µs, Nov 24, fed9). The two are held equal by a hypothesis property
    (``tests/test_federation_shadow.py``: resources, cordons, GPU model, devices, app density)."""
    if not cluster.schedulable[node] or (free < pod.request).any():
        return False
    if pod.limited and (col := cluster.app_column(pod.app)) < len(apps) and apps[col] >= pod.max_per_node:
        return False  # (a column added after ``apps`` was copied counts 0)
    return pod.gpu_milli <= 0 or bool(cluster.spec_mask(pod.gpu_model)[node]
                                       and (gpu_free >= pod.gpu_milli).sum() >= pod.num_gpu)


def widened(cluster: Cluster, apps: np.ndarray, app: str) -> np.ndarray:
    """A node's app counts ``apps`` (copied earlier), with zeros for the columns ``cluster`` added since, ``app``'s
    included (added on first sight)."""
    cluster.app_column(app)
    return np.pad(apps, (0, cluster.app_count.shape[1] - len(apps)))


def reservation(cluster: Cluster, head: Pod, end: np.ndarray, now: float) -> Reservation:
    """The head's reservation on ``cluster`` (module docstring), from the running pods' ``end`` (per uid)."""
    free_now = np.flatnonzero(fit_mask(cluster, head)).tolist()
    if free_now:
        live = (cluster.free, cluster.gpu_free, cluster.app_count)
        return Reservation(now, free_now, *([a[n] for n in free_now] for a in live))
    rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    running = np.fromiter(cluster.placements, dtype=np.int64, count=len(cluster.placements))
    shadow = np.inf
    for uid in running[np.argsort(end[running], kind="stable")].tolist():
        if end[uid] > shadow:
            break
        placed = cluster.placements[uid]
        n, pod = placed.node, placed.pod
        free, gpu, apps = rows.setdefault(n, (cluster.free[n].copy(), cluster.gpu_free[n].copy(),
                                              cluster.app_count[n].copy()))
        free += pod.request
        devices = list(placed.devices)
        gpu[devices] += np.where(cluster.gpu_healthy[n, devices], pod.gpu_milli, 0)
        if pod.app:
            apps[cluster.app_column(pod.app)] -= 1
        if shadow == np.inf and holds(cluster, head, n, free, gpu, apps):
            shadow = float(end[uid])
    nodes = [n for n, row in rows.items() if holds(cluster, head, n, *row)] if shadow < np.inf else []
    return Reservation(shadow, nodes, *([rows[n][i] for n in nodes] for i in range(3)))


def may_pass(cluster: Cluster, head: Pod, booked: Reservation, job: Pod, end: float) -> bool:
    """May ``job``, ending at ``end``, start now on ``cluster`` ahead of ``head`` with reservation ``booked``."""
    if end <= booked.time or len(booked.nodes) != 1:
        return True
    m = booked.nodes[0]
    if not holds(cluster, job, m, cluster.free[m], cluster.gpu_free[m], cluster.app_count[m]):
        return True
    free, gpu, apps = booked.free[0] - job.request, booked.gpu_free[0], booked.apps[0]
    if job.app:
        apps = widened(cluster, apps, job.app)  # a copy
        apps[cluster.app_column(job.app)] += 1
    if head.gpu_milli > 0 and job.gpu_milli > 0:  # job may take the devices that drop below the head's need
        gpu = gpu.copy()
        lost = np.flatnonzero((gpu >= head.gpu_milli) & (gpu < head.gpu_milli + job.gpu_milli))[:job.num_gpu]
        gpu[lost] = 0
    return holds(cluster, head, m, free, gpu, apps)


class ShadowGuard(Backfilling):
    """Passes a queue only where the head's reservation allows it (module docstring)."""

    def reset(self, view: View) -> None:
        super().reset(view)
        self.booked: dict[int, tuple[tuple[int, int], Reservation]] = {}  # cluster -> ((change mark, head), its)

    def passable(self, job: int, now: float, among: np.ndarray) -> np.ndarray:
        v = self.view
        out = np.ones(v.clusters, dtype=bool)
        for c in np.flatnonzero(among & (v.head >= 0)).tolist():
            out[c] = self.admits(c, job, now)
        return out

    def admits(self, c: int, job: int, now: float) -> bool:
        """May ``job`` start now on cluster ``c``, whose queue has a head, ahead of that head."""
        v = self.view
        return may_pass(v.nodes[c], v.pod(int(v.head[c])), self.reserve(c, now), v.pod(job), now + v.duration[job])

    def reserve(self, c: int, now: float) -> Reservation:
        """Cluster ``c``'s head's reservation, cached until the cluster or its head changes."""
        v = self.view
        key = (v.nodes[c].change_mark, int(v.head[c]))
        kept = self.booked.get(c)
        if kept is None or kept[0] != key:
            kept = self.booked[c] = (key, reservation(v.nodes[c], v.pod(key[1]), v.end, now))
        return kept[1]


class ShadowRule(ShadowGuard, BackfillRule):
    name = "carbon-aware-shadow"


class ShadowDisplacement(ShadowGuard, BackfillDisplacement):
    name = "ours-displace-shadow"
