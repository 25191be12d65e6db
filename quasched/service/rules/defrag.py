"""Dynamic job swapping: migrate running jobs off one node so a waiting multi-GPU job fits there."""

from __future__ import annotations

from dataclasses import replace

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies import Scheduler
from quasched.service.domain import MAX_GANG, Job
from quasched.service.rules.preemption import fits_on

#: a move: ((node, devices) before, (node, devices) after)
Move = tuple[tuple[str, tuple[int, ...]], tuple[str, tuple[int, ...]]]


def try_moves(cluster: Cluster, scheduler: Scheduler, pod: Pod, node: int, movable: list[Job]) -> dict[int, Move] | None:
    """Move one-pod jobs off ``node``, in order, each re-placed by the policy on another node of the same
    GPU model, until ``pod`` fits on ``node``; returns job id -> move, or None with the state restored exactly."""
    c = cluster
    model = str(c.models[c.model_id[node]])
    moves: dict[int, Move] = {}
    for job in movable:
        old = c.remove(job.id * MAX_GANG)
        c.cordon(node)
        decision = scheduler.schedule(replace(old.pod, gpu_model=model))  # same model: the quota charge holds
        c.uncordon(node)
        if not decision.placed:
            c.place(old.pod, node, old.devices)
            break
        moves[job.id] = ((str(c.names[node]), old.devices), (str(c.names[decision.node]), decision.devices))
        if fits_on(c, pod, node):
            return moves
    for job_id, (before, _) in reversed(list(moves.items())):
        moved = c.remove(job_id * MAX_GANG)
        c.place(moved.pod, node, before[1])
    return None
