"""Node changes and recovery under the service's loop: nodes added, removed, cordoned, drained,
GPU devices failed or healthy (their jobs requeued, the placements assumed there lost), queues created
or changed, and unfinished jobs re-admitted from the store at their recorded nodes and devices
(:class:`NodeChanges`)."""

from __future__ import annotations

from typing import Sequence

from quasched.model.cluster import PlacementError
from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI
from quasched.service.domain import Event, Job, JobState, NodeRecord, QueueSpec
from quasched.service.loop.lifecycle import Lifecycle
from quasched.service.loop.state import LoopState


class NodeChanges:
    """Node and queue changes, and recovery from the store, on ``state``; ``life`` requeues and arms jobs."""

    def __init__(self, state: LoopState, life: Lifecycle) -> None:
        self.state = state
        self.life = life

    def _capacity_follows(self) -> None:
        self.state.quota.capacity_milli = FULL_GPU_MILLI * self.state.cluster.total_gpus

    def add_node(self, record: NodeRecord, now: float) -> None:
        """Add ``record``'s node (cordoned and unhealthy devices as recorded); the GPU quota capacity follows."""
        c = self.state.cluster
        c.add_node(record.name, {"cpu": record.cpu_milli, "memory": record.memory_mib}, record.num_gpus,
                   record.gpu_model, record.labels)
        if record.cordoned:
            c.cordon(record.name)
        for d in record.unhealthy:
            c.set_device_health(record.name, d, False)
        self._capacity_follows()
        self.state.changes.note(Event(now, "node-added", node=record.name))
        self.state.dirty = True

    def add_nodes(self, nodes: NodeSpec) -> None:
        """Add the (uncordoned, healthy) ``nodes`` at once: one resize of the cluster's arrays, however many; the
        GPU quota capacity follows. Their ``node-added`` events are the caller's, stored with the nodes."""
        self.state.cluster.add_nodes(nodes)
        self._capacity_follows()
        self.state.dirty = True

    def remove_node(self, name: str, now: float) -> None:
        """Drain node ``name`` (its jobs are requeued) and remove it (and what its devices' live state avoided); the
        GPU quota capacity follows."""
        self.drain(name, now)
        self.state.cluster.remove_node(name)
        self.state.avoided.pop(name, None)
        self._capacity_follows()
        self.state.changes.note(Event(now, "node-removed", node=name))

    def cordon(self, name: str, now: float, drain: bool = False) -> None:
        """Place nothing more on node ``name``; with ``drain`` also requeue its jobs."""
        self.state.cluster.cordon(name)
        self.state.changes.note(Event(now, "node-cordoned", node=name))
        if drain:
            self.drain(name, now)

    def uncordon(self, name: str, now: float) -> None:
        """Let node ``name`` take jobs again."""
        self.state.cluster.uncordon(name)
        self.state.changes.note(Event(now, "node-uncordoned", node=name))
        self.state.dirty = True

    def drain(self, name: str, now: float) -> None:
        """Requeue every job with a pod on node ``name``; its assumed placements are lost (reported, not requeued)."""
        node = self.state.cluster.node(name)
        self.state.assumptions.lose_on(node)
        for job in self.state.jobs_on(node):
            self.life.requeue(job, now, "evicted", node=name)

    def set_device_health(self, name: str, device: int, healthy: bool, now: float) -> None:
        """Mark a GPU device; jobs on a failed device are requeued."""
        st = self.state
        node = st.cluster.node(name)
        st.cluster.set_device_health(node, device, healthy)
        st.changes.note(Event(now, "device-healthy" if healthy else "device-unhealthy", node=name,
                              data={"device": device}))
        if not healthy:
            st.assumptions.lose_on(node, device)
            for job in st.jobs_on(node, device):
                self.life.requeue(job, now, "evicted", node=name, device=device)
        st.dirty = True

    def avoid_devices(self, name: str, avoided: dict[int, str], now: float) -> None:
        """From now on new pods avoid exactly the devices ``avoided`` of node ``name`` (device -> why, from their
        live state: cordoned in the cluster model); the pods on them keep running."""
        st, c = self.state, self.state.cluster
        node, before = c.node(name), st.avoided.get(name, {})
        avoided = {d: why for d, why in avoided.items() if 0 <= d < c.num_gpus[node]}
        for device in sorted(set(before) | set(avoided)):
            if (device in before) != (device in avoided):
                c.cordon_device(node, device, device in avoided)
                if device in avoided:
                    st.assumptions.lose_on(node, device)
                st.changes.note(Event(now, "device-avoided" if device in avoided else "device-trusted", node=name,
                                      data={"device": device} | ({"why": avoided[device]} if device in avoided else {})))
        st.avoided[name] = avoided
        st.dirty = True

    def put_queue(self, spec: QueueSpec) -> None:
        """Create or replace a queue (quota and cohort); the next cycle reconsiders every pending job."""
        self.state.quota.put(spec)
        self.state.full = self.state.dirty = True

    def restore(self, jobs: Sequence[Job], observe: bool = True) -> None:
        """Re-admit unfinished jobs from the store: running ones at their recorded nodes and devices.

        ``observe``: the typical pods relearn their shapes (False: they were observed on arrival)."""
        st = self.state
        for job in sorted(jobs, key=lambda j: j.seq):
            st.jobs[job.id] = job
            if observe:  # typical pods: relearned from the jobs that are still around
                st.observe(st.pod(job.spec, job.id, 0))
            if job.state.holds_resources:
                problem = self._restore_placement(job)
                if problem:  # the node left or changed while the service was down
                    job.placement, job.state, job.started_at = [], JobState.PENDING, None
                    st.fresh.add(job.id)
                    st.changes.emit(job.submitted_at, "requeued", job, error=problem)
                    continue
                self.life.arm(job)
        st.full = st.dirty = True

    def _restore_placement(self, job: Job) -> str:
        """Bind a restored running job where the store says it runs; the error ("" = none, nothing bound)."""
        st, placed = self.state, []
        c = st.cluster
        try:
            for k, (name, devices) in enumerate(job.placement):
                placed.append(c.place(st.pod(job.spec, job.id, k), c.node(name), devices))
        except PlacementError as err:
            for p in placed:
                c.remove(p.pod)
            return str(err)
        for p in placed:
            st.quota.charge(job.spec.team, str(c.models[c.model_id[p.node]]), job.spec.gpu_request)
        return ""
