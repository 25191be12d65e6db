"""Queueing: the order in which a pass tries the pending jobs, and their queue positions (:mod:`.controller`'s
docstring: priority, then the queue with the lowest fair share, then the repeated-submission weight, then
submission order; or submission order alone)."""

from __future__ import annotations

import heapq
from collections import Counter, deque

from quasched.service.domain import Job, JobState
from quasched.service.loop.state import LoopState


class Queueing:
    """Orders the pending jobs of ``state`` and numbers their positions."""

    def __init__(self, state: LoopState) -> None:
        self.state = state
        self.options, self.quota, self.jobs, self.position = state.options, state.quota, state.jobs, state.position

    def order(self, only: set[int] | None = None) -> list[Job]:
        """Pending jobs (those in ``only``, if given) in the order of the module docstring."""
        pending = sorted((j for j in self.jobs.values() if j.state == JobState.PENDING
                          and (only is None or j.id in only)), key=lambda j: j.seq)
        if self.options.order == "fifo":
            return pending
        weight: dict[int, float] = {}
        alpha, seen = self.options.decay_alpha, Counter[tuple[str, str]]()
        for job in pending:
            key = (job.spec.user, job.spec.app)
            weight[job.id] = alpha ** seen[key] if alpha is not None else 1.0
            seen[key] += 1
        by_queue: dict[str, deque[Job]] = {}
        for job in sorted(pending, key=lambda j: (-j.priority, -weight[j.id], j.seq)):
            by_queue.setdefault(job.spec.team, deque()).append(job)
        share = {q: self.quota.share(q) for q in by_queue}
        heads = [(-q[0].priority, share[name], -weight[q[0].id], q[0].seq, name) for name, q in by_queue.items()]
        heapq.heapify(heads)
        order: list[Job] = []
        gpus = Counter[str]()
        while heads:
            *_, name = heapq.heappop(heads)
            job = by_queue[name].popleft()
            order.append(job)
            gpus[name] += job.gpu_total  # the share the queue would have if it got the job
            if by_queue[name]:
                nxt = by_queue[name][0]
                spec = self.quota.queues[name]
                nominal = sum(spec.quota.values()) * 1000 or self.quota.capacity_milli or 1
                heapq.heappush(heads, (-nxt.priority, share[name] + gpus[name] / nominal / spec.weight,
                                       -weight[nxt.id], nxt.seq, name))
        return order

    def number(self, tried: list[int], full: bool) -> None:
        """Queue positions 1, 2, ... of the pending jobs: those this pass tried in its order, after the earlier
        ones when it tried only newcomers."""
        seen = set(tried)
        earlier = [] if full else sorted((i for i in self.position if i not in seen), key=self.position.__getitem__)
        pending = [i for i in earlier + tried if i in self.jobs and self.jobs[i].state == JobState.PENDING]
        self.position.clear()
        self.position.update((job_id, k) for k, job_id in enumerate(pending, 1))
