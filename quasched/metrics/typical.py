"""A workload's typical pods (Weng et al., ATC'23), against which fragmentation is measured:
:class:`TypicalPods`, the most popular shapes covering a share of the pods, known up front (from a
workload or a list of shapes) with the rare heavy shapes that complete the GPU demand, and
:class:`TypicalWindow`, the same learned online from the last arrivals, rebuilt when their mix drifts."""

from __future__ import annotations

from collections import Counter, deque
from typing import Mapping
from dataclasses import dataclass

import numpy as np

from quasched.model.workload import Pod, Workload, shape_keys

Shape = tuple[int, int, int, str]


#: % of a workload's GPU demand (count × GPU milli × GPUs) that :attr:`TypicalPods.heavy` covers
HEAVY_COVER = 99.0


@dataclass(frozen=True)
class TypicalPods:
    """The most popular pod shapes covering ``threshold`` % of a workload.

    ``heavy``: the other shapes that, with these, cover :data:`HEAVY_COVER` % of the
    GPU demand, with their counts (rare big pods, e.g. 8 GPUs with 120 cores: FGD's
    typical pods leave them out, a policy may still keep room for them).
    """

    shapes: tuple[Shape, ...]
    counts: tuple[int, ...]
    freq: np.ndarray
    heavy: tuple[tuple[Shape, int], ...] = ()

    @classmethod
    def from_workload(cls, workload: Workload, threshold: float = 95.0,
                      include_cpu_pods: bool = True) -> "TypicalPods":
        """Popularity ranking of shapes ``(cpu, gpu_milli, num_gpu, gpu_model)``.

        Ties in count are broken by the shape itself, descending, which makes
        the order total and deterministic.
        """
        return cls.from_shapes([k for k in shape_keys(workload) if include_cpu_pods or k[1] > 0], threshold)

    @classmethod
    def from_shapes(cls, keys: list[Shape], threshold: float = 95.0) -> "TypicalPods":
        """Typical pods of a list of pod shapes (one entry per pod)."""
        return cls.from_counts(Counter(keys), threshold)

    @classmethod
    def from_counts(cls, counts: Mapping[Shape, int], threshold: float = 95.0) -> "TypicalPods":
        """Typical pods of the pods counted per shape (positive counts)."""
        if not counts:
            raise ValueError("cannot derive typical pods from an empty workload")
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        total = sum(counts.values())
        expected = (threshold * total) / 100.0
        cum, kept = 0, 0
        while cum < expected and kept < len(ranked):
            cum += ranked[kept][1]
            kept += 1
        top = [c for _, c in ranked[:kept]]
        if kept == len(ranked):
            freq = [c / total for c in top]
        else:
            freq = [(c / total) / (cum / total) for c in top]
        return cls(tuple(s for s, _ in ranked[:kept]), tuple(top), np.asarray(freq), _heavy(ranked, kept))

    def with_heavy(self) -> "TypicalPods":
        """These shapes and the :attr:`heavy` ones, weighted by count."""
        counts = self.counts + tuple(c for _, c in self.heavy)
        return TypicalPods(self.shapes + tuple(s for s, _ in self.heavy), counts, np.asarray(counts) / sum(counts))


def _heavy(ranked: list[tuple[Shape, int]], kept: int) -> tuple[tuple[Shape, int], ...]:
    """The shapes past ``ranked[:kept]`` among the largest GPU demands that cover :data:`HEAVY_COVER` %."""
    demand = sorted(ranked, key=lambda kv: (kv[1] * kv[0][1] * kv[0][2], kv[0]), reverse=True)
    goal, typical = HEAVY_COVER / 100 * sum(c * s[1] * s[2] for s, c in ranked), set(s for s, _ in ranked[:kept])
    heavy, cum = [], 0
    for shape, count in demand:
        if cum >= goal:
            break
        cum += count * shape[1] * shape[2]
        if shape not in typical:
            heavy.append((shape, count))
    return tuple(heavy)


#: :class:`TypicalWindow`'s default ``drift``: a per-shape fragment lies between 0 and a node's free GPU milli, so a
#: mix within this total variation distance measures fragmentation within about this share of the free GPUs
DRIFT = 0.05


class TypicalWindow:
    """Typical pods learned online: the shapes of the last ``window`` arrivals.

    :meth:`observe` each arriving pod; :attr:`current` (``initial`` until then; ``None`` if not given) is rebuilt
    from the window at the first arrival, whenever the window's mix of shapes is ``drift`` or more away (total
    variation distance, :meth:`distance`) from the mix it was built from, and at least every ``every`` arrivals,
    so fragmentation-aware policies need no knowledge of the workload up front and follow a new shape within a
    few arrivals. Plugins compare :attr:`current` by identity to know when to rebuild.
    """

    def __init__(self, window: int = 2000, every: int = 200, threshold: float = 95.0,
                 initial: TypicalPods | None = None, drift: float = DRIFT) -> None:
        if window < 1 or every < 1:
            raise ValueError("window and every must be at least 1")
        if not 0 < drift <= 1:
            raise ValueError(f"drift must be in (0, 1], not {drift}")
        self.every = every
        self.threshold = threshold
        self.drift = drift
        self.current = initial
        self._recent: deque[Shape] = deque(maxlen=window)
        self._counts: Counter[Shape] = Counter()
        #: the counts :attr:`current` was built from, and the arrivals since
        self._built: Counter[Shape] = Counter() if initial is None else Counter(
            dict(zip(initial.shapes, initial.counts)) | dict(initial.heavy))
        self._since = 0

    def observe(self, pod: Pod) -> None:
        """Record an arriving :class:`~quasched.model.workload.Pod`."""
        if len(self._recent) == self._recent.maxlen:
            self._forget(self._recent[0])
        self._recent.append(pod.shape)
        self._counts[pod.shape] += 1
        self._since += 1
        if self.current is None or self._since >= self.every or self._drifted():
            self.current = TypicalPods.from_counts(self._counts, self.threshold)
            self._built, self._since = self._counts.copy(), 0

    def distance(self) -> float:
        """Total variation distance between the window's mix of shapes and the one :attr:`current` was built from
        (1 before there is one)."""
        now, then = len(self._recent), sum(self._built.values())
        if not now or not then:
            return 1.0
        return sum(abs(self._counts[s] / now - self._built[s] / then) for s in self._counts | self._built) / 2

    def _drifted(self) -> bool:
        # k arrivals since the build move the mix by at most k / (window length): no exact sum before that reaches drift
        return self._since >= self.drift * len(self._recent) and self.distance() >= self.drift

    def _forget(self, shape: Shape) -> None:
        self._counts[shape] -= 1
        if not self._counts[shape]:
            del self._counts[shape]
