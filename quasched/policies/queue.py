"""The pending queue: pods waiting for room, retried when capacity grows.

Shared by the trace replay and the scheduler service. Pods wait in arrival
(FIFO) order. A retry walks the queue front to back and runs a scheduling
cycle for each pod that some node can now host; the others keep their place.

Guard. A queued pod failed on every node when it last tried, and since then
the cluster only got fuller except on the nodes whose capacity grew
(:meth:`Cluster.take_grown <quasched.model.cluster.Cluster.take_grown>`:
pods removed, nodes added or uncordoned, devices recovered). So a queued pod
can only fit on a grown node, and within one retry, once a pod failed, every
later pod of its *fit class* (:class:`FitClasses`: equal
:attr:`Pod.fit_key <quasched.model.workload.Pod.fit_key>`) fails too. A retry
therefore tests classes × grown nodes in one vectorised step, walks the class
heads in FIFO order, runs a cycle only for a head whose class still fits a
grown node, and after each placement refreshes the column of the node that
took the pod. This yields exactly the placements (and random draws) of
retrying every queued pod one by one (``tests/sim/test_replay_properties.py``).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Callable, Iterator

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.fit import Demand, fit_matrix
from quasched.model.workload import Pod
from quasched.policies.framework import Decision


class FitClasses:
    """Interns pods by :attr:`Pod.fit_key`; pods of one class fit exactly the same nodes."""

    def __init__(self) -> None:
        self._index: dict[tuple, int] = {}
        self._pods: list[Pod] = []
        self._demand: Demand | None = None
        self._recent: dict[bytes, Demand] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def of(self, pod: Pod) -> int:
        """Class id of ``pod`` (a new class on first sight)."""
        key = pod.fit_key
        cls = self._index.get(key)
        if cls is None:
            cls = self._index[key] = len(self._pods)
            self._pods.append(pod)
            self._demand = None
        return cls

    def demand(self, classes: np.ndarray) -> Demand:
        """The :class:`Demand` of ``classes``, one row each (the last few sets are kept: queues change slowly)."""
        if self._demand is None:
            self._demand = Demand.of(self._pods)
            self._recent.clear()
        key = classes.tobytes()
        demand = self._recent.get(key)
        if demand is None:
            if len(self._recent) >= 64:
                self._recent.pop(next(iter(self._recent)))
            demand = self._recent[key] = self._demand.rows(classes)
        return demand

    def fits(self, cluster: Cluster, classes: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """``(len(classes), len(nodes))``: can a pod of each class run on each node now."""
        return fit_matrix(cluster, self.demand(classes), nodes)


class PendingQueue:
    """FIFO of waiting pods with a fit-class retry guard (module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.classes = FitClasses()
        self._queues: dict[int, deque[tuple[int, Pod]]] = {}
        self._live: dict[int, tuple[int, int]] = {}  # uid -> (sequence, class)
        self._class_live = np.zeros(16, dtype=np.int64)  # queued pods per fit class
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, uid: int) -> bool:
        return uid in self._live

    def push(self, pod: Pod) -> None:
        """Queue ``pod`` at the back."""
        if pod.uid in self._live:
            raise ValueError(f"pod {pod.name} (uid {pod.uid}) is already queued")
        cls = self.classes.of(pod)
        self._queues.setdefault(cls, deque()).append((self._seq, pod))
        self._live[pod.uid] = (self._seq, cls)
        if cls >= len(self._class_live):
            self._class_live = np.concatenate([self._class_live, np.zeros(len(self._class_live), dtype=np.int64)])
        self._class_live[cls] += 1
        self._seq += 1

    def discard(self, uid: int) -> bool:
        """Take a pod out of the queue (withdrawn, cancelled); False if it is not queued."""
        entry = self._live.pop(uid, None)
        if entry is None:
            return False
        self._class_live[entry[1]] -= 1
        return True

    def pods(self) -> list[Pod]:
        """Queued pods, front first."""
        entries = [e for q in self._queues.values() for e in q if self._live.get(e[1].uid, (None,))[0] == e[0]]
        return [pod for _, pod in sorted(entries, key=lambda e: e[0])]

    def _head(self, cls: int) -> tuple[int, Pod] | None:
        queue = self._queues[cls]
        while queue and self._live.get(queue[0][1].uid, (None,))[0] != queue[0][0]:
            queue.popleft()
        return queue[0] if queue else None

    def retry(self, schedule: Callable[[Pod], Decision]) -> Iterator[tuple[Pod, Decision]]:
        """One front-to-back pass after capacity grew; yields each pod placed with its decision.

        ``schedule`` runs a full scheduling cycle and binds on success.
        """
        grown = self.cluster.take_grown()
        active = np.flatnonzero(self._class_live > 0)
        if not len(self._live) or not len(grown) or not len(active):
            return
        fit = self.classes.fits(self.cluster, active, grown)
        keep = fit.any(axis=1)
        candidates, fit = active[keep], fit[keep]
        demand = self.classes.demand(candidates)
        row = {cls: i for i, cls in enumerate(candidates.tolist())}
        heads = [(head[0], cls) for cls in row if (head := self._head(cls)) is not None]
        heapq.heapify(heads)
        while heads:
            _, cls = heapq.heappop(heads)
            if not fit[row[cls]].any():
                continue  # the class is out for this round: the state only gets fuller
            pod = self._queues[cls][0][1]
            decision = schedule(pod)
            col = int(np.searchsorted(grown, decision.node))
            if not decision.placed or col == len(grown) or grown[col] != decision.node:
                raise RuntimeError(f"queue guard out of sync with the Filter step for pod {pod.name}")
            self.discard(pod.uid)
            self._queues[cls].popleft()
            yield pod, decision
            fit[:, col] = fit_matrix(self.cluster, demand, grown[col:col + 1])[:, 0]
            if self._class_live[cls] and (head := self._head(cls)) is not None:
                heapq.heappush(heads, (head[0], cls))
