"""A workload's typical pods (Weng et al., ATC'23), against which fragmentation is measured:
:class:`TypicalPods`, the most popular shapes covering a share of the pods, known up front (from a
workload or a list of shapes) with the rare heavy shapes that complete the GPU demand, and
:class:`TypicalWindow`, the same learned online from the last arrivals."""

from __future__ import annotations

from collections import Counter, deque
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
        if not keys:
            raise ValueError("cannot derive typical pods from an empty workload")
        ranked = sorted(Counter(keys).items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        total = len(keys)
        expected = (threshold * total) / 100.0
        cum, kept = 0, 0
        while cum < expected and kept < len(ranked):
            cum += ranked[kept][1]
            kept += 1
        counts = [c for _, c in ranked[:kept]]
        if kept == len(ranked):
            freq = [c / total for c in counts]
        else:
            freq = [(c / total) / (cum / total) for c in counts]
        return cls(tuple(s for s, _ in ranked[:kept]), tuple(counts), np.asarray(freq), _heavy(ranked, kept))

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


class TypicalWindow:
    """Typical pods learned online: the shapes of the last ``window`` arrivals.

    :meth:`observe` each arriving pod; :attr:`current` is recomputed every
    ``every`` arrivals (``initial`` until then; ``None`` if not given), so
    fragmentation-aware policies need no knowledge of the workload up front.
    Plugins compare :attr:`current` by identity to know when to rebuild.
    """

    def __init__(self, window: int = 2000, every: int = 200, threshold: float = 95.0,
                 initial: TypicalPods | None = None) -> None:
        if window < 1 or every < 1:
            raise ValueError("window and every must be at least 1")
        self.every = every
        self.threshold = threshold
        self.current = initial
        self._recent: deque[Shape] = deque(maxlen=window)
        self._seen = 0

    def observe(self, pod: Pod) -> None:
        """Record an arriving :class:`~quasched.model.workload.Pod`."""
        self._recent.append(pod.shape)
        self._seen += 1
        if self._seen % self.every == 0 or self.current is None:
            self.current = TypicalPods.from_shapes(list(self._recent), self.threshold)
