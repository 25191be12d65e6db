"""Quotas, borrowing and fair share of GPU queues (Kueue's ClusterQueue/cohort model).

Each queue has a nominal GPU quota per GPU model; the key :data:`ANY_MODEL`
covers every model the queue does not name. As in Kueue, a queue with a quota
admits only the models it names (or all with :data:`ANY_MODEL`); a queue with
no quota at all is not limited. Usage is charged in milli-GPU to the key of
the model the job runs on.

Admission of ``R`` milli on model ``m`` for queue ``q`` (key ``k``, nominal
``N``, usage ``U``):

* ``U + R <= N``: within nominal — always admissible (capacity held by
  borrowers is reclaimed by preemption);
* otherwise ``q`` borrows ``U + R - N``: only with a cohort, at most its
  ``borrowing_limit``, and only if ``R`` fits in the cohort's unused quota
  ``sum over q' in cohort of (N_q' - U_q')`` (keys of ``m`` per queue; what
  a queue borrowed counts against what the others can still lend), less
  what the other queues' pending jobs need of their own unused quota
  (:attr:`QuotaBook.pending`): quota a lender is about to use is not lent,
  so reclaimed capacity is not borrowed straight back.

Fair share (dominant-resource share): ``max_k U_k / N_k / weight`` over the
queue's limited keys; an unlimited queue's share is its usage over the
cluster's GPU capacity, divided by its weight. Lower share goes first.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from quasched.service.domain import ANY_MODEL, QueueSpec

MILLI = 1000


class QuotaBook:
    """Usage per (queue, quota key) in milli-GPU, and the admission and share rules above."""

    def __init__(self, queues: Iterable[QueueSpec] = ()) -> None:
        self.queues: dict[str, QueueSpec] = {}
        self.usage: defaultdict[tuple[str, str], int] = defaultdict(int)
        #: milli-GPU wanted by each queue's pending jobs (set by the loop every pass)
        self.pending: dict[str, int] = {}
        self.capacity_milli = 0
        for q in queues:
            self.put(q)

    def put(self, queue: QueueSpec) -> None:
        """Create or replace a queue's quota and cohort."""
        self.queues[queue.name] = queue

    def key(self, queue: str, model: str) -> str | None:
        """The quota key charged for ``model`` (None: no key; see :meth:`limited`)."""
        quota = self.queues[queue].quota
        return model if model in quota else ANY_MODEL if ANY_MODEL in quota else None

    def limited(self, queue: str) -> bool:
        """Whether ``queue`` has a quota (then it admits only the models its keys cover)."""
        return bool(self.queues[queue].quota)

    def nominal(self, queue: str, key: str) -> int:
        """The queue's nominal quota on ``key`` in GPU milli."""
        return round(self.queues[queue].quota[key] * MILLI)

    def unused(self, queue: str, model: str) -> int:
        """Nominal minus usage on ``model``'s key (negative while borrowing; 0 if not limited)."""
        key = self.key(queue, model)
        return 0 if key is None else self.nominal(queue, key) - self.usage[queue, key]

    def cohort(self, queue: str) -> list[str]:
        """The queues sharing ``queue``'s cohort (itself included; empty without a cohort)."""
        cohort = self.queues[queue].cohort
        return [q for q, spec in self.queues.items() if cohort and spec.cohort == cohort]

    def within_nominal(self, queue: str, model: str, milli: int) -> bool:
        """Whether ``milli`` more GPU on ``model`` keeps ``queue`` within its own quota (no borrowing)."""
        key = self.key(queue, model)
        if key is None:
            return not self.limited(queue)
        return self.usage[queue, key] + milli <= self.nominal(queue, key)

    def admits(self, queue: str, model: str, milli: int) -> bool:
        """Whether ``queue`` may use ``milli`` more on ``model`` now (module docstring)."""
        if milli == 0 or self.within_nominal(queue, model, milli):
            return True
        spec, key = self.queues[queue], self.key(queue, model)
        if key is None:
            return False
        over = self.usage[queue, key] + milli - self.nominal(queue, key)
        if not spec.cohort or (spec.borrowing_limit is not None and over > round(spec.borrowing_limit * MILLI)):
            return False
        members = self.cohort(queue)
        held = sum(min(self.pending.get(q, 0), max(0, self.unused(q, model))) for q in members if q != queue)
        return milli <= sum(self.unused(q, model) for q in members) - held

    def ceiling(self, queue: str, model: str) -> float:
        """Most milli-GPU ``queue`` could ever use on ``model``: nominal plus what its cohort could lend, at most its
        borrowing limit (infinite for a queue without quota)."""
        if not self.limited(queue):
            return float("inf")
        key = self.key(queue, model)
        if key is None:
            return 0.0
        spec = self.queues[queue]
        lendable = sum(self.nominal(q, k) for q in self.cohort(queue)
                       if q != queue and (k := self.key(q, model)) is not None)
        if spec.borrowing_limit is not None:
            lendable = min(lendable, round(spec.borrowing_limit * MILLI))
        return float(self.nominal(queue, key) + lendable)

    def charge(self, queue: str, model: str, milli: int) -> None:
        """Add (or with negative ``milli`` release) usage."""
        key = self.key(queue, model) or model
        self.usage[queue, key] += milli

    def borrowed(self, queue: str) -> int:
        """Milli-GPU used beyond nominal, over all limited keys."""
        quota = self.queues[queue].quota
        return sum(max(0, self.usage[queue, k] - self.nominal(queue, k)) for k in quota)

    def share(self, queue: str) -> float:
        """Dominant-resource share over weight (module docstring)."""
        spec = self.queues[queue]
        limited = [self.usage[queue, k] / self.nominal(queue, k) if self.nominal(queue, k) else float("inf")
                   for k in spec.quota if self.usage[queue, k]]
        if spec.quota:
            dominant = max(limited, default=0.0)
        else:
            used = sum(v for (q, _), v in self.usage.items() if q == queue)
            dominant = used / self.capacity_milli if self.capacity_milli else 0.0
        return dominant / spec.weight

    def fair_share(self) -> dict[str, float]:
        """Each queue's fair share of the cluster's GPUs (milli): weight-proportional, capped by nominal+borrowing."""
        total = sum(q.weight for q in self.queues.values()) or 1.0
        return {name: self.capacity_milli * q.weight / total for name, q in self.queues.items()}
