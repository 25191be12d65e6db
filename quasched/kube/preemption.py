"""Preemption and quota reclaim for GPU pods, decided by quasched and carried out through the Eviction API.

A managed pod that fits nowhere among kube-scheduler's candidates (filter) may stop running GPU pods, by the
service's own rules (:mod:`quasched.service.rules.preemption`): pods of lower priority (``spec.priority``, from
their PriorityClass), and, when the pod's queue stays within its nominal quota, pods of the queues of its cohort
that borrow (Kueue's reclaim), whatever their priority. The victims are minimised on one node at the device level,
so the devices freed are the ones the pod is then given; a pod that evictions already under way make room for
waits for them instead (none needless). Evictions run off the request path, one plan at a time:

1. a victim that belongs to a pod group (:mod:`.gangs`) brings every bound member of its group: gangs stop whole;
2. each eviction is first tried as a dry run: a refusal (a PodDisruptionBudget that allows no disruption, 429)
   cancels the whole plan before any pod stops, and its victims are not chosen again for
   :data:`PROTECTED_S`;
3. the evictions are posted (``policy/v1`` where served, else ``policy/v1beta1``) with the victim's uid as a
   precondition; the kubelet sends SIGTERM and grants the pod its ``terminationGracePeriodSeconds``;
4. the victims' jobs become ``preempting`` (event ``preempting``, reason ``Preempted`` naming the pod they stop
   for) until the sync sees their pods gone.

When the last victim is gone, the devices are held for the preemptor (an assumed placement, as filter's pick,
for :data:`NOMINEE_HOLD_S`), so no other pod takes the room it paid for; kube-scheduler retries it on the pods'
deletion. kube-scheduler's own preemption of GPU pods is switched off by the extender's preempt verb, which
answers no victims: its in-tree view counts shares, not devices, deletes without PodDisruptionBudgets, and stops
pods on one node only.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from quasched.kube import log
from quasched.kube.convention import DEFAULT_GRACE_S, is_managed, pod_grace, pod_key, pod_priority, token_uid
from quasched.kube.gangs import group_of
from quasched.kube.reservations import Hold
from quasched.model.workload import Pod
from quasched.service.domain import Job, JobSpec, JobState
from quasched.service.loop.controller import Controller
from quasched.service.rules.preemption import cheapest_node, reclaims, room_after, victim_order

#: how long a victim whose eviction a PodDisruptionBudget refused is not chosen again, s
PROTECTED_S = 60.0
#: how long a preemptor waits for its victims beyond their grace period before it chooses again, s
NOMINATION_SLACK_S = 60.0
#: how long the freed devices are held for the preemptor once its victims are gone, s
NOMINEE_HOLD_S = 60.0
#: filter's reason while a pod waits for the pods stopping for it (one stable string: it aggregates)
PREEMPTING = "quasched: waiting for preempted GPU pods to stop"


class EvictionClient(Protocol):
    """What evictions need from the API server (:class:`~.client.KubernetesClient`)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def group_pods(self, ref: Any) -> list[dict[str, Any]]: ...

    def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool = False) -> None: ...


class Pods(Protocol):
    """What evictions need of the extender's bridge (:class:`~.extender.Bridge`)."""

    service: Any
    holds: dict[str, Hold]

    def job_of(self, uid: str) -> Job | None: ...

    def may_act(self) -> bool: ...

    def binds_under_way(self) -> frozenset[str]: ...

    def _assume(self, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, node: str, devices: tuple[int, ...],
                ttl_s: float = ...) -> Hold | None: ...


@dataclass
class Nomination:
    """A pod that preempted: as filter gave it, as quasched places it, the node chosen, its victims (job ids)."""

    pod: Mapping[str, Any]
    qpod: Pod
    spec: JobSpec
    node: str
    victims: tuple[int, ...]
    until: float


@dataclass(frozen=True)
class Victim:
    """A pod to evict: its job's id, namespace, name, uid, and the grace its kubelet gives it."""

    job_id: int
    namespace: str
    name: str
    uid: str
    grace_s: float = DEFAULT_GRACE_S


@dataclass
class Plan:
    """Victims to evict for ``preemptor`` (its ``namespace/name``): per victim its job id, namespace, name, uid."""

    preemptor: str
    by: str
    victims: list[Victim] = field(default_factory=list)


class Evictions:
    """The preemptions under way on Kubernetes (module docstring); its state is changed under the service lock."""

    def __init__(self, bridge: Pods, client: EvictionClient | None) -> None:
        self.bridge = bridge
        self.client = client
        #: preemptor pod uid → its nomination
        self.nominations: dict[str, Nomination] = {}
        #: victim job id → until when it is not chosen (a PodDisruptionBudget refused its eviction)
        self.protected: dict[int, float] = {}
        self._plans: queue.Queue[Plan | None] = queue.Queue()
        self._worker: threading.Thread | None = None

    @property
    def service(self) -> Any:
        return self.bridge.service

    # ------------------------------------------------------------ the decision (under the service lock)
    def make_room(self, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, slots: Sequence[int]) -> str | None:
        """Make room for ``pod``, which fits on none of the node ``slots`` (kube-scheduler's candidates): the reason
        to answer while it waits for victims (chosen now, or already stopping), or None if no preemption helps."""
        if self.client is None or not self.bridge.may_act() or (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            return None  # (a standby replica evicts nothing; a pod may decline to preempt, as kube-scheduler reads it)
        ctl: Controller = self.service.ctl
        now, uid = self.service.clock(), pod_key(pod)[2]
        self._expire(now)
        mine = self.nominations.get(uid)
        if mine is not None and any(self._holding(ctl, v) for v in mine.victims):
            return PREEMPTING
        self.nominations.pop(uid, None)  # its victims left and it still does not fit (or none): choose again
        among = set(slots)
        priority = pod_priority(pod)
        claimed = {v for n in self.nominations.values() for v in n.victims}  # (chosen, perhaps not evicted yet)
        stopping = [j for j in ctl.jobs.values() if j.state.holds_resources and token_uid(j.spec.client_token)
                    and (j.state == JobState.PREEMPTING or j.id in claimed)]
        if stopping and room_after(ctl.cluster, stopping, [n.qpod for n in self.nominations.values()], qpod, among):
            self._nominate(uid, pod, qpod, spec, "", tuple(j.id for j in stopping), now)
            return PREEMPTING
        promised = sum(n.spec.num_gpu * n.spec.gpu_milli for n in self.nominations.values() if n.spec.team == spec.team)
        milli = spec.num_gpu * spec.gpu_milli
        reclaim = reclaims(ctl.quota, ctl.cluster.models, spec.team, milli + promised, qpod.gpu_model)
        binding = self.bridge.binds_under_way()  # (stored running, its Binding not posted yet: not a victim)
        running = [j for j in ctl.jobs.values() if j.state == JobState.RUNNING and j.id not in claimed
                   and token_uid(j.spec.client_token) not in (None, *binding) and self.protected.get(j.id, 0.0) <= now]
        victims = victim_order(ctl.quota, running, spec.team, priority, reclaim)
        best = cheapest_node(ctl.cluster, qpod, victims, among=among) if victims else None
        if best is None:
            return None
        node, chosen = best
        name = f"{pod_key(pod)[0]}/{pod_key(pod)[1]}"
        plan = Plan(uid, name)
        for job in chosen:
            namespace, _, victim = job.spec.name.partition("/")
            plan.victims.append(Victim(job.id, namespace, victim, token_uid(job.spec.client_token) or ""))
        self._nominate(uid, pod, qpod, spec, str(ctl.cluster.names[node]), tuple(j.id for j in chosen), now)
        self._start()
        self._plans.put(plan)
        return PREEMPTING

    def _nominate(self, uid: str, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, node: str,
                  victims: tuple[int, ...], now: float) -> None:
        self.nominations[uid] = Nomination(pod, qpod, spec, node, victims, now + DEFAULT_GRACE_S + NOMINATION_SLACK_S)

    @staticmethod
    def _holding(ctl: Controller, job_id: int) -> bool:
        job = ctl.jobs.get(job_id)
        return job is not None and job.state.holds_resources

    def _expire(self, now: float) -> None:
        for uid in [u for u, n in self.nominations.items() if n.until <= now]:
            del self.nominations[uid]
        for job_id in [j for j, until in self.protected.items() if until <= now]:
            del self.protected[job_id]

    def settle(self) -> None:
        """Victims ended: hold their room for each preemptor whose victims are all gone (under the lock)."""
        ctl: Controller = self.service.ctl
        self._expire(self.service.clock())
        for uid, nom in list(self.nominations.items()):
            if any(self._holding(ctl, v) for v in nom.victims):
                continue
            del self.nominations[uid]
            if not nom.node or uid in self.bridge.holds or self.bridge.job_of(uid) is not None:
                continue  # (waited on others' victims: no node of its own; or placed already)
            [slot] = ctl.cluster.slots_of([nom.node])
            if slot is None:
                continue
            decision = ctl.scheduler.decide(nom.qpod, [slot], counted=False)
            if decision.placed:
                self.bridge._assume(nom.pod, nom.qpod, nom.spec, nom.node, decision.devices, NOMINEE_HOLD_S)

    def forget(self, uid: str) -> None:
        """Pod ``uid`` ended or went away: it waits for no victims (under the lock)."""
        self.nominations.pop(uid, None)

    # ------------------------------------------------------------ the evictions (off the request path)
    def _start(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="quasched-evictions", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while (plan := self._plans.get()) is not None:
            try:
                self.carry_out(plan)
            except Exception as err:  # never let the worker die: the plan's pod chooses again later
                log(f"preemption for {plan.by} failed: {err}")
                self._abandon(plan, [])
            finally:
                self._plans.task_done()

    def drain(self) -> None:
        """Wait until every plan handed over so far is carried out (tests, shutdown)."""
        self._plans.join()

    def stop(self) -> None:
        if self._worker is not None and self._worker.is_alive():
            self._plans.put(None)
            self._worker.join(timeout=5.0)

    def carry_out(self, plan: Plan) -> None:
        """Evict ``plan``'s victims (with their gangs), all or none as far as the dry run can tell."""
        assert self.client is not None
        pods = self._with_gangs(plan)
        refused = []
        for v in pods:
            try:
                self.client.evict_pod(v.namespace, v.name, v.uid, dry_run=True)
            except Exception as err:
                if getattr(err, "status", None) != 404:  # (gone already: nothing to evict)
                    refused.append((v, str(err)))
        if refused:
            log(f"preemption for {plan.by} cancelled, nothing evicted: "
                + "; ".join(f"{v.namespace}/{v.name}: {why}" for v, why in refused))
            self._abandon(plan, [v.job_id for v in pods])  # (the whole plan: its first choice would be made again)
            return
        evicted: list[Victim] = []
        for v in pods:
            try:
                self.client.evict_pod(v.namespace, v.name, v.uid)
            except Exception as err:
                if getattr(err, "status", None) != 404:  # refused after its dry run passed: evict no more
                    log(f"eviction of {v.namespace}/{v.name} for {plan.by} failed, the rest of its plan left: {err}")
                    self._abandon(plan, [v.job_id])
                    self._mark(plan, evicted, whole=False)
                    return
            evicted.append(v)
        self._mark(plan, evicted)

    def _with_gangs(self, plan: Plan) -> list[Victim]:
        """``plan``'s victims still running as booked, and every bound member of their pod groups, as the API
        server has them."""
        assert self.client is not None
        out: dict[str, Victim] = {}
        for v in plan.victims:
            try:
                pod = self.client.get_pod(v.namespace, v.name)
            except Exception:
                continue  # gone: nothing to evict (the sync ends its job)
            if pod_key(pod)[2] != v.uid:
                continue
            out[v.uid] = Victim(v.job_id, v.namespace, v.name, v.uid, pod_grace(pod))
            ref = group_of(pod)
            if ref is None or not ref.valid:
                continue
            for member in self.client.group_pods(ref):
                namespace, name, uid = pod_key(member)
                if uid in out or not is_managed(member) or not (member.get("spec") or {}).get("nodeName"):
                    continue
                with self.service.lock:
                    job = self.bridge.job_of(uid)
                if job is not None and job.state == JobState.RUNNING:
                    out[uid] = Victim(job.id, namespace, name, uid, pod_grace(member))
        return list(out.values())

    def _abandon(self, plan: Plan, refused: list[int]) -> None:
        """The plan is not carried out: its victims are protected a while (``refused``), its pod chooses again."""
        with self.service.lock:
            now = self.service.clock()
            for job_id in refused:
                self.protected[job_id] = now + PROTECTED_S
            self.nominations.pop(plan.preemptor, None)

    def _mark(self, plan: Plan, evicted: list[Victim], whole: bool = True) -> None:
        """The evicted victims' jobs are ``preempting`` until their pods are gone (durable); the preemptor waits for
        exactly them (``whole``: the plan was carried out; else it chooses again once they are gone)."""
        def change(ctl: Controller, now: float) -> None:
            for v in evicted:
                job = ctl.jobs.get(v.job_id)
                if job is not None and job.state == JobState.RUNNING:
                    ctl.preempting(v.job_id, now, f"pod {plan.by}", v.grace_s)
            nom = self.nominations.get(plan.preemptor)
            if nom is not None and whole:
                nom.victims = tuple(sorted({v.job_id for v in evicted}))
                nom.until = now + max((v.grace_s for v in evicted), default=DEFAULT_GRACE_S) + NOMINATION_SLACK_S

        try:
            self.service.mutate(change)
        except Exception as err:  # e.g. fenced: the pods are evicted all the same; the sync ends their jobs
            log(f"cannot record the preemption for {plan.by}: {err}")
        with self.service.lock:
            self.settle()

