"""Node changes and recovery under the service's loop: nodes added, removed, cordoned, drained,
GPU devices failed or healthy (their jobs requeued, the placements assumed there lost), queues created
or changed, and unfinished jobs re-admitted from the store at their recorded nodes and devices."""

from __future__ import annotations

import heapq
from typing import Sequence

from quasched.model.cluster import PlacementError
from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI
from quasched.service.domain import Event, Job, JobState, NodeRecord, QueueSpec
from quasched.service.loop_state import LoopState


class NodeChanges(LoopState):
    """Node and queue changes, and recovery from the store (mixed into :class:`~.controller.Controller`)."""

    def add_node(self, record: NodeRecord, now: float) -> None:
        """Add ``record``'s node (cordoned and unhealthy devices as recorded); the GPU quota capacity follows."""
        c = self.cluster
        c.add_node(record.name, {"cpu": record.cpu_milli, "memory": record.memory_mib}, record.num_gpus,
                   record.gpu_model, record.labels)
        if record.cordoned:
            c.cordon(record.name)
        for d in record.unhealthy:
            c.set_device_health(record.name, d, False)
        self.quota.capacity_milli = FULL_GPU_MILLI * c.total_gpus
        self._events.append(Event(now, "node-added", node=record.name))
        self._dirty = True

    def add_nodes(self, nodes: NodeSpec) -> None:
        """Add the (uncordoned, healthy) ``nodes`` at once: one resize of the cluster's arrays, however many; the
        GPU quota capacity follows. Their ``node-added`` events are the caller's, stored with the nodes."""
        self.cluster.add_nodes(nodes)
        self.quota.capacity_milli = FULL_GPU_MILLI * self.cluster.total_gpus
        self._dirty = True

    def remove_node(self, name: str, now: float) -> None:
        """Drain node ``name`` (its jobs are requeued) and remove it; the GPU quota capacity follows."""
        self.drain(name, now)
        self.cluster.remove_node(name)
        self.quota.capacity_milli = FULL_GPU_MILLI * self.cluster.total_gpus
        self._events.append(Event(now, "node-removed", node=name))

    def cordon(self, name: str, now: float, drain: bool = False) -> None:
        """Place nothing more on node ``name``; with ``drain`` also requeue its jobs."""
        self.cluster.cordon(name)
        self._events.append(Event(now, "node-cordoned", node=name))
        if drain:
            self.drain(name, now)

    def uncordon(self, name: str, now: float) -> None:
        """Let node ``name`` take jobs again."""
        self.cluster.uncordon(name)
        self._events.append(Event(now, "node-uncordoned", node=name))
        self._dirty = True

    def drain(self, name: str, now: float) -> None:
        """Requeue every job with a pod on node ``name``; its assumed placements are lost (reported, not requeued)."""
        node = self.cluster.node(name)
        self.assumptions.lose_on(node)
        for job in self._jobs_on(node):
            self._requeue(job, now, "evicted", node=name)

    def set_device_health(self, name: str, device: int, healthy: bool, now: float) -> None:
        """Mark a GPU device; jobs on a failed device are requeued."""
        node = self.cluster.node(name)
        self.cluster.set_device_health(node, device, healthy)
        self._events.append(Event(now, "device-healthy" if healthy else "device-unhealthy", node=name,
                                  data={"device": device}))
        if not healthy:
            self.assumptions.lose_on(node, device)
            for job in self._jobs_on(node, device):
                self._requeue(job, now, "evicted", node=name, device=device)
        self._dirty = True

    def put_queue(self, spec: QueueSpec) -> None:
        """Create or replace a queue (quota and cohort); the next cycle reconsiders every pending job."""
        self.quota.put(spec)
        self._full = self._dirty = True

    def restore(self, jobs: Sequence[Job], observe: bool = True) -> None:
        """Re-admit unfinished jobs from the store: running ones at their recorded nodes and devices.

        ``observe``: the typical pods relearn their shapes (False: they were observed on arrival)."""
        for job in sorted(jobs, key=lambda j: j.seq):
            self.jobs[job.id] = job
            if observe:  # typical pods: relearned from the jobs that are still around
                self.observe(self._pod(job.spec, job.id, 0))
            if job.state.holds_resources:
                problem = self._restore_placement(job)
                if problem:  # the node left or changed while the service was down
                    job.placement, job.state, job.started_at = [], JobState.PENDING, None
                    self._fresh.add(job.id)
                    self._emit(job.submitted_at, "requeued", job, error=problem)
                    continue
                self._arm(job)
        self._full = self._dirty = True

    def _arm(self, job: Job) -> None:
        """The timers of a job entering the loop running: grace-period end, completion by duration, time limit."""
        if job.state in (JobState.PREEMPTING, JobState.STOPPING) and job.preempt_at is not None:
            heapq.heappush(self._timers, (job.preempt_at, job.id, "preempt" if job.state == JobState.PREEMPTING else "stop"))
        for seconds, what in ((job.spec.duration_s, "finish"), (job.spec.time_limit_s, "limit")):
            if seconds is not None and job.started_at is not None:
                heapq.heappush(self._timers, (job.started_at + seconds, job.id, what))

    def _restore_placement(self, job: Job) -> str:
        """Bind a restored running job where the store says it runs; the error ("" = none, nothing bound)."""
        c, placed = self.cluster, []
        try:
            for k, (name, devices) in enumerate(job.placement):
                placed.append(c.place(self._pod(job.spec, job.id, k), c.node(name), devices))
        except PlacementError as err:
            for p in placed:
                c.remove(p.pod)
            return str(err)
        for p in placed:
            self.quota.charge(job.spec.team, str(c.models[c.model_id[p.node]]), job.spec.gpu_request)
        return ""
