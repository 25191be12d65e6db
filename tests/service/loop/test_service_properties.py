"""Invariants of the service's loop under random sequences of submissions, completions,
cancellations, node and device changes and time (hypothesis state machine)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from quasched.model.cluster import Cluster
from quasched.model.workload import NO_LIMIT, Pod
from quasched.service.domain import MAX_GANG, JobSpec, JobState, NodeRecord, QueueSpec
from quasched.service.loop.controller import Controller, nodes_of
from quasched.service.loop.state import LoopOptions, SpecError
from quasched.service.rules.feasibility import most_pods, pods_when_empty

NODES = [NodeRecord("n0", 16_000, 64_000, 2, "A100"), NodeRecord("n1", 16_000, 64_000, 4, "A100"),
         NodeRecord("n2", 8_000, 32_000, 1, "T4"), NodeRecord("n3", 32_000, 128_000, 0, "")]
QUEUES = [QueueSpec("a", {"*": 3}, "c"), QueueSpec("b", {"A100": 2}, "c", borrowing_limit=1),
          QueueSpec("solo", {"*": 1})]
GPUS = st.sampled_from([0, 0.25, 0.5, 1, 2])


class LoopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.next_id = 1
        self.ctl: Controller | None = None

    @rule(policy=st.sampled_from(["fgd", "bestfit", "firstfit"]), order=st.sampled_from(["fair", "fifo"]),
          grace=st.sampled_from([0.0, 5.0]), defrag=st.sampled_from([0, 3]), decay=st.sampled_from([None, 0.6]))
    @precondition(lambda self: self.ctl is None)
    def start(self, policy, order, grace, defrag, decay):
        self.ctl = Controller(nodes_of(NODES), QUEUES, LoopOptions(
            policy=policy, order=order, grace_s=grace, defrag_per_hour=defrag, decay_alpha=decay, seed=3))

    @rule(team=st.sampled_from(["a", "b", "solo"]), gpus=GPUS, pods=st.integers(1, 2),
          prio=st.sampled_from(["low", "normal", "high"]), duration=st.sampled_from([None, 3.0, 10.0]),
          model=st.sampled_from(["", "A100", "T4"]), user=st.sampled_from(["u", "v"]))
    @precondition(lambda self: self.ctl is not None)
    def submit(self, team, gpus, pods, prio, duration, model, user):
        whole = gpus >= 1
        spec = JobSpec("j", team, 1000, 1024, int(gpus) if whole else int(gpus > 0), 1000 if whole else int(gpus * 1000),
                       model, pods, user=user, priority_class=prio, duration_s=duration)
        try:
            self.ctl.submit(self.next_id, spec, self.now)
        except SpecError:
            return
        self.next_id += 1
        self.ctl.cycle(self.now)

    def _pick(self, data, states):
        ids = sorted(j.id for j in self.ctl.jobs.values() if j.state in states)
        return data.draw(st.sampled_from(ids)) if ids else None

    @rule(data=st.data(), failed=st.booleans())
    @precondition(lambda self: self.ctl is not None)
    def finish(self, data, failed):
        job = self._pick(data, (JobState.RUNNING, JobState.PREEMPTING))
        if job is not None:
            self.ctl.finish(job, self.now, failed)
            self.ctl.cycle(self.now)

    @rule(data=st.data())
    @precondition(lambda self: self.ctl is not None)
    def cancel(self, data):
        job = self._pick(data, (JobState.PENDING, JobState.RUNNING))
        if job is not None:
            self.ctl.cancel(job, self.now)
            self.ctl.cycle(self.now)

    @rule(dt=st.sampled_from([1.0, 4.0, 20.0]))
    @precondition(lambda self: self.ctl is not None)
    def advance(self, dt):
        self.now += dt
        self.ctl.cycle(self.now)

    @rule(node=st.sampled_from(["n0", "n1", "n2"]), device=st.integers(0, 3), healthy=st.booleans())
    @precondition(lambda self: self.ctl is not None)
    def device(self, node, device, healthy):
        if device < int(self.ctl.cluster.num_gpus[self.ctl.cluster.node(node)]):
            self.ctl.set_device_health(node, device, healthy, self.now)
            self.ctl.cycle(self.now)

    @rule(node=st.sampled_from(["n0", "n1", "n2", "n3"]), cordon=st.booleans(), drain=st.booleans())
    @precondition(lambda self: self.ctl is not None)
    def cordon(self, node, cordon, drain):
        if cordon:
            self.ctl.cordon(node, self.now, drain)
        else:
            self.ctl.uncordon(node, self.now)
        self.ctl.cycle(self.now)

    @invariant()
    def consistent(self):
        if self.ctl is None:
            return
        ctl, c = self.ctl, self.ctl.cluster
        assert (c.free >= 0).all() and (c.gpu_alloc <= 1000).all() and (c.gpu_alloc >= 0).all()
        assert (c.gpu_alloc[~c.gpu_healthy] == 0).all()  # nothing runs on a failed device
        expected = {j.id * MAX_GANG + k for j in ctl.jobs.values() if j.state.holds_resources for k in range(j.spec.pods)}
        assert set(c.placements) == expected  # each running pod placed exactly once, nothing else
        usage = Counter()
        for job in ctl.jobs.values():
            if job.state.holds_resources:
                assert [str(c.names[c.placements[job.id * MAX_GANG + k].node]) for k in range(job.spec.pods)] == \
                       [n for n, _ in job.placement]
                for name, _ in job.placement:
                    model = str(c.models[c.model_id[c.node(name)]])
                    usage[job.spec.team, ctl.quota.key(job.spec.team, model) or model] += job.spec.gpu_request
            elif job.state == JobState.PENDING:
                assert job.reason is not None and not job.placement
        assert {k: v for k, v in ctl.quota.usage.items() if v} == {k: v for k, v in usage.items() if v}
        assert ctl.quota.usage["solo", "*"] <= 1000  # no cohort: never above nominal
        assert ctl.quota.usage["b", "A100"] <= 2000 + 1000  # nominal + borrowing limit
        per_device = np.zeros_like(c.gpu_alloc)
        for p in c.placements.values():
            per_device[p.node, list(p.devices)] += p.pod.gpu_milli
        assert (per_device == c.gpu_alloc).all()


LoopMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLoop = LoopMachine.TestCase


SHAPES = st.builds(lambda cpu, gpu, model, limit: Pod(0, "p", cpu, 1024, int(gpu) or int(gpu > 0),
                                                      1000 if gpu >= 1 else int(gpu * 1000), model, "app", limit),
                   st.sampled_from([1000, 16_000]), st.sampled_from([0, 0.5, 1, 2, 4]),
                   st.sampled_from(["", "A100", "T4", "A100|T4"]), st.sampled_from([NO_LIMIT, 1]))
NODE_CHANGES = st.one_of(
    st.tuples(st.just("add"), st.sampled_from([0, 1, 2, 4]), st.sampled_from(["A100", "T4"])),
    st.tuples(st.just("remove"), st.integers(0, 7)),
    st.tuples(st.just("device"), st.integers(0, 7), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("cordon"), st.integers(0, 7)))


@settings(max_examples=60, deadline=None)
@given(changes=st.lists(NODE_CHANGES, max_size=12), shapes=st.lists(SHAPES, min_size=1, max_size=4))
def test_remembered_answer_per_shape_equals_counting_again_after_node_changes(changes, shapes):
    """What could ever fit, remembered per pod shape, equals counting over the nodes again after any sequence of
    nodes joining and leaving, devices failing and recovering and cordons."""
    c = Cluster(nodes_of(NODES))
    for step, change in enumerate(changes):
        for pod in shapes:
            assert most_pods(c, pod) == pods_when_empty(c, pod)
        present = np.flatnonzero(c.present)
        node = int(present[change[1] % len(present)]) if change[0] != "add" and len(present) else None
        if change[0] == "add":
            c.add_node(f"new{step}", {"cpu": 16_000, "memory": 64_000}, change[1], change[2] if change[1] else "")
        elif node is not None and change[0] == "remove":
            c.remove_node(node)
        elif node is not None and change[0] == "device" and change[2] < c.num_gpus[node]:
            c.set_device_health(node, change[2], change[3])
        elif node is not None and change[0] == "cordon":
            c.cordon(node)
    for pod in shapes:
        assert most_pods(c, pod) == pods_when_empty(c, pod)
