"""Preemption and quota reclaim for GPU pods, decided by quasched and carried out through the Eviction API.

A managed pod that fits nowhere among kube-scheduler's candidates (filter) may stop running GPU pods, by the
service's own rules (:mod:`quasched.service.rules.preemption`): pods of lower priority (``spec.priority``, from
their PriorityClass), and, when the pod's queue stays within its nominal quota, pods of the queues of its cohort
that borrow (Kueue's reclaim), whatever their priority. The victims are minimised on one node at the device level,
so the devices freed are the ones the pod is then given; a pod that evictions already under way make room for
waits for them instead (none needless). Evictions run off the request path, one plan at a time:

1. a victim that belongs to a pod group (:mod:`.gangs`) brings every bound member of its group: gangs stop whole
   (a victim evicted already with an earlier plan's gang is not evicted again: the plan waits for it);
2. each eviction is first tried as a dry run: a refusal (a PodDisruptionBudget that allows no disruption, 429)
   cancels the whole plan before any pod stops, and its victims are not chosen again for
   :data:`PROTECTED_S`;
3. the evictions are posted (``policy/v1`` where served, else ``policy/v1beta1``) with the victim's uid as a
   precondition; the kubelet sends SIGTERM and grants the pod its ``terminationGracePeriodSeconds``;
4. the victims' jobs become ``preempting`` (event ``preempting``, reason ``Preempted`` naming the pod they stop
   for) until the sync sees their pods gone.

A preemptor waits for its victims until their grace period and :data:`NOMINATION_SLACK_S` have passed, counted
from their evictions (a plan waiting for the worker does not use up its time). When the last victim is gone, the
devices are held for the preemptor (an assumed placement, as filter's pick, for :data:`NOMINEE_HOLD_S`), in the
same hold of the service lock as the victim's end, so no other pod takes the room it paid for; and the preemptor
is annotated (:data:`~.convention.PREEMPTION_ANNOTATION`), so kube-scheduler tries it at once rather than after its
back-off (a preemptor found gone then is held nothing). A victim that outlives the deadline (stuck Terminating: a
finalizer, a node whose kubelet is gone) ends the nomination; its devices stay booked while its pod exists, no
other pod is evicted in its place, and the preemptor's reason names it (:data:`STUCK`).

A plan is carried out only if its preemptor still wants it: still nominated (not placed elsewhere meanwhile, not
ended), still waiting unbound in the API server (no watch reports an unbound pod's deletion), and this replica may
still act. kube-scheduler's own preemption is switched off: ``DefaultPreemption`` in the shipped profiles (1.20's
never asks an extender, and crashes on candidates without victims), and the extender's preempt verb answers no
victims where it is on: its in-tree view counts shares, not devices, deletes without PodDisruptionBudgets, and stops
pods on one node only.
"""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from quasched.kube import log
from quasched.kube.convention import (DEFAULT_GRACE_S, PREEMPTION_ANNOTATION, is_managed, pod_grace, pod_key,
                                      pod_priority, token_uid)
from quasched.kube.gangs import group_of
from quasched.kube.reservations import Hold, requeue, unbound
from quasched.model.workload import Pod
from quasched.service.domain import Job, JobSpec, JobState
from quasched.service.loop.controller import Controller
from quasched.service.loop.state import utc
from quasched.service.rules.preemption import cheapest_node, reclaims, room_after, victim_order

#: how long a victim whose eviction a PodDisruptionBudget refused is not chosen again, s
PROTECTED_S = 60.0
#: how long a preemptor waits for its victims beyond their grace period before it chooses again, s
NOMINATION_SLACK_S = 60.0
#: how long the freed devices are held for the preemptor once its victims are gone, s
NOMINEE_HOLD_S = 60.0
#: filter's reason while a pod waits for the pods stopping for it (one stable string: it aggregates)
PREEMPTING = "quasched: waiting for preempted GPU pods to stop"
#: filter's reason, followed by their names, while some of the pods it waits for outlive their deadline
STUCK = "quasched: waiting for preempted GPU pods to stop past their grace period"
#: most pods named in :data:`STUCK`'s reason
NAMED = 3


class EvictionClient(Protocol):
    """What evictions need from the API server (:class:`~.client.KubernetesClient`)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def group_pods(self, ref: Any) -> list[dict[str, Any]]: ...

    def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool = False) -> None: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...


class Pods(Protocol):
    """What evictions need of the extender's bridge (:class:`~.extender.Bridge`)."""

    service: Any
    holds: dict[str, Hold]

    def job_of(self, uid: str) -> Job | None: ...

    def may_act(self) -> bool: ...

    def binds_under_way(self) -> frozenset[str]: ...

    def drop_hold(self, uid: str) -> Hold | None: ...

    def _assume(self, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, node: str, devices: tuple[int, ...],
                ttl_s: float = ...) -> Hold | None: ...


@dataclass(eq=False)
class Nomination:
    """A pod that preempted: as filter gave it, as quasched places it, the node chosen (``""``: it waits for others'
    victims), its victims (job ids), and until when it waits for them: their grace period and
    :data:`NOMINATION_SLACK_S` from their evictions (``inf`` while its plan waits for the worker)."""

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
    """Victims to evict for ``preemptor`` (its uid; ``by``: its ``namespace/name``), made with ``nomination``."""

    preemptor: str
    by: str
    nomination: Nomination
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
        #: victim job id → when its pod should be gone (its eviction, its grace and the slack)
        self.due: dict[int, float] = {}
        #: victim pod uid → (for whom, grace) while its eviction is posted and not recorded yet
        self.evicting: dict[str, tuple[str, float]] = {}
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
        self._expire(ctl, now)
        mine = self.nominations.get(uid)
        if mine is not None and (waited := self._stopping(ctl, mine.victims)):
            if mine.until == math.inf:
                self._start()  # (its plan waits for the worker: one is alive)
            return self._reason(waited, now)
        self.nominations.pop(uid, None)  # its victims left (or were not evicted) and it still does not fit: again
        among = set(slots)
        priority = pod_priority(pod)
        claimed = self._claimed()
        stopping = self._stopping(ctl, (j.id for j in ctl.jobs.values() if token_uid(j.spec.client_token)))
        if stopping and room_after(ctl.cluster, stopping, [n.qpod for n in self.nominations.values()], qpod, among):
            self._nominate(uid, pod, qpod, spec, "", tuple(j.id for j in stopping),
                           now + DEFAULT_GRACE_S + NOMINATION_SLACK_S)
            return self._reason(stopping, now)
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
        nomination = self._nominate(uid, pod, qpod, spec, str(ctl.cluster.names[node]), tuple(j.id for j in chosen),
                                    math.inf)  # (its deadline starts with its evictions: :meth:`_mark`)
        plan = Plan(uid, name, nomination)
        for job in chosen:
            namespace, _, victim = job.spec.name.partition("/")
            plan.victims.append(Victim(job.id, namespace, victim, token_uid(job.spec.client_token) or ""))
        self._start()
        self._plans.put(plan)
        return PREEMPTING

    def _nominate(self, uid: str, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, node: str,
                  victims: tuple[int, ...], until: float) -> Nomination:
        nomination = self.nominations[uid] = Nomination(pod, qpod, spec, node, victims, until)
        return nomination

    def _claimed(self) -> set[int]:
        """The victims of the plans under way (chosen, perhaps not evicted yet); not those a pod merely waits for."""
        return {v for n in self.nominations.values() if n.node for v in n.victims}

    def _stopping(self, ctl: Controller, job_ids: Any) -> list[Job]:
        """Of ``job_ids``, the jobs that will stop: evicted (``preempting``), or claimed by a plan under way; a job
        a refused plan left running is none (its waiters choose again)."""
        claimed = self._claimed()
        out = []
        for job_id in job_ids:
            job = ctl.jobs.get(job_id)
            if job is not None and job.state.holds_resources and \
                    (job.state == JobState.PREEMPTING or job.id in claimed):
                out.append(job)
        return out

    def _due(self, job: Job) -> float:
        """When the pod of evicted ``job`` should be gone (its reason's time with the default grace, if quasched
        restarted since; inf: not evicted)."""
        if job.id in self.due:
            return self.due[job.id]
        evidence = job.reason.evidence if job.reason is not None else {}
        at = evidence.get("preempted_at") if job.state == JobState.PREEMPTING else None
        return float(at) + DEFAULT_GRACE_S + NOMINATION_SLACK_S if isinstance(at, (int, float)) else math.inf

    def _reason(self, waited: Sequence[Job], now: float) -> str:
        """filter's reason for a pod waiting for ``waited``: :data:`PREEMPTING`, or :data:`STUCK` naming the pods
        that outlived their deadline."""
        late = sorted(j.spec.name for j in waited if self._due(j) <= now)
        if not late:
            return PREEMPTING
        more = f" and {len(late) - NAMED} more" if len(late) > NAMED else ""
        return f"{STUCK}: {', '.join(late[:NAMED])}{more}"

    @staticmethod
    def _holding(ctl: Controller, job_id: int) -> bool:
        job = ctl.jobs.get(job_id)
        return job is not None and job.state.holds_resources

    def _expire(self, ctl: Controller, now: float) -> None:
        for uid in [u for u, n in self.nominations.items() if n.until <= now]:
            nom = self.nominations.pop(uid)
            left = [j.spec.name for j in self._stopping(ctl, nom.victims)]
            if nom.node and left:
                namespace, name, _ = pod_key(nom.pod)
                log(f"preemption for {namespace}/{name}: {', '.join(left)} still stopping past the grace period; "
                    "it waits no longer as nominated (their GPUs stay booked while their pods exist)")
        for job_id in [j for j, until in self.protected.items() if until <= now]:
            del self.protected[job_id]
        for job_id in [j for j in self.due if not self._holding(ctl, j)]:
            del self.due[job_id]

    def settle(self) -> None:
        """Victims ended: hold their room for each preemptor whose victims are all gone, and have kube-scheduler try
        it at once (under the lock, in the same hold of it as the victims' end)."""
        ctl: Controller = self.service.ctl
        now = self.service.clock()
        self._expire(ctl, now)
        for uid, nom in list(self.nominations.items()):
            if any(self._holding(ctl, v) for v in nom.victims):
                continue
            del self.nominations[uid]
            if uid in self.bridge.holds or self.bridge.job_of(uid) is not None:
                continue  # (placed already)
            if not nom.node:  # (waited on others' victims: no node of its own, only a try now)
                self._poke(uid, nom, "room freed at " + utc(now))
                continue
            [slot] = ctl.cluster.slots_of([nom.node])
            if slot is None:
                continue
            decision = ctl.scheduler.decide(nom.qpod, [slot], counted=False)
            if decision.placed and self.bridge._assume(nom.pod, nom.qpod, nom.spec, nom.node, decision.devices,
                                                       NOMINEE_HOLD_S) is not None:
                self._poke(uid, nom, f"room held on {nom.node} until {utc(now + NOMINEE_HOLD_S)}")

    def _poke(self, uid: str, nom: Nomination, what: str) -> None:
        """Annotate the preemptor (in a thread): kube-scheduler tries it again at once. Found gone: its hold ends."""
        namespace, name, _ = pod_key(nom.pod)
        requeue(self.client, [(namespace, name, uid, {PREEMPTION_ANNOTATION: what})], gone=self._gone,
                name="quasched-preemptor-requeue")

    def _gone(self, uid: str) -> None:
        """The preemptor ``uid`` went away before it bound (no watch says so): what is held for it is free again."""
        with self.service.lock:
            held = self.bridge.holds.get(uid)
            if held is not None and not held.binding:
                self.bridge.drop_hold(uid)
            self.forget(uid)

    def forget(self, uid: str) -> None:
        """Pod ``uid`` ended, went away or was placed: it waits for no victims (under the lock)."""
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
                with self.service.lock:
                    for uid in [u for u, (by, _) in self.evicting.items() if by == f"pod {plan.by}"]:
                        del self.evicting[uid]
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
        """Evict ``plan``'s victims (with their gangs), all or none as far as the dry run can tell, if its preemptor
        still wants them (:meth:`_wanted`, asked again just before the evictions)."""
        assert self.client is not None
        if not self._wanted(plan, read=True):
            return
        pods, stopping = self._with_gangs(plan)
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
        with self.service.lock:
            if not self._wanted(plan):
                return
            for v in pods:  # (a pod the watch reports gone before _mark is ended as preempted: release)
                self.evicting[v.uid] = (f"pod {plan.by}", v.grace_s)
        evicted: list[Victim] = []
        for v in pods:
            try:
                self.client.evict_pod(v.namespace, v.name, v.uid)
            except Exception as err:
                if getattr(err, "status", None) != 404:  # refused after its dry run passed: evict no more
                    log(f"eviction of {v.namespace}/{v.name} for {plan.by} failed, the rest of its plan left: {err}")
                    self._abandon(plan, [v.job_id])
                    self._mark(plan, evicted, pods, whole=False)
                    return
            evicted.append(v)
        self._mark(plan, evicted, pods, stopping)

    def _wanted(self, plan: Plan, read: bool = False) -> bool:
        """Whether ``plan``'s preemptor still wants it: still nominated by it, this replica may still act, and
        (``read``) the API server has the pod waiting unbound; else it ends, nothing evicted."""
        with self.service.lock:
            why = "" if self.nominations.get(plan.preemptor) is plan.nomination else "it is placed, or it ended"
            why = why or ("" if self.bridge.may_act() else "this replica may not act")
        if not why and read:
            namespace, _, name = plan.by.partition("/")
            why = "" if unbound(self.client, namespace, name, plan.preemptor) else "it went away, or is bound"
        if why:
            log(f"preemption for {plan.by} dropped, nothing evicted: {why}")
            with self.service.lock:
                if self.nominations.get(plan.preemptor) is plan.nomination:
                    del self.nominations[plan.preemptor]
        return not why

    def _with_gangs(self, plan: Plan) -> tuple[list[Victim], list[int]]:
        """``plan``'s victims still running as booked, and every bound member of their pod groups, as the API
        server has them; and the victims stopping already (evicted meanwhile with a gang of an earlier plan: not
        evicted twice, waited for)."""
        assert self.client is not None
        out: dict[str, Victim] = {}
        stopping: list[int] = []
        for v in plan.victims:
            with self.service.lock:
                job = self.service.ctl.jobs.get(v.job_id)
            if job is None or not job.state.holds_resources:
                continue  # (ended: nothing to evict)
            if job.state == JobState.PREEMPTING:
                stopping.append(v.job_id)
                continue
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
        return list(out.values()), stopping

    def _abandon(self, plan: Plan, refused: list[int]) -> None:
        """The plan is not carried out: its victims are protected a while (``refused``), its pod chooses again."""
        with self.service.lock:
            now = self.service.clock()
            for job_id in refused:
                self.protected[job_id] = now + PROTECTED_S
            if self.nominations.get(plan.preemptor) is plan.nomination:
                del self.nominations[plan.preemptor]

    def _mark(self, plan: Plan, evicted: list[Victim], posted: list[Victim], stopping: Sequence[int] = (),
              whole: bool = True) -> None:
        """The evicted victims' jobs are ``preempting`` until their pods are gone (durable), due by their grace
        and the slack from now; the preemptor waits for exactly them and the ``stopping`` ones, until the last is due
        (``whole``: the plan was carried out; else it chooses again once they are gone). ``posted``: every eviction
        tried."""
        def change(ctl: Controller, now: float) -> None:
            for v in evicted:
                job = ctl.jobs.get(v.job_id)
                if job is not None and job.state == JobState.RUNNING:
                    ctl.preempting(v.job_id, now, f"pod {plan.by}", v.grace_s)
                self.due[v.job_id] = now + v.grace_s + NOMINATION_SLACK_S
            nom = self.nominations.get(plan.preemptor)
            if nom is plan.nomination and whole:
                nom.victims = tuple(sorted({v.job_id for v in evicted} | set(stopping)))
                nom.until = max([now + max((v.grace_s for v in evicted), default=DEFAULT_GRACE_S) + NOMINATION_SLACK_S,
                                 *(self._due(ctl.jobs[j]) for j in stopping if j in ctl.jobs)])

        with self.service.lock:  # (one hold of it: a victim's end and the preemptor's room are never split)
            try:
                self.service.mutate(change)
            except Exception as err:  # e.g. fenced: the pods are evicted all the same; the sync ends their jobs
                log(f"cannot record the preemption for {plan.by}: {err}")
            finally:
                for v in posted:
                    self.evicting.pop(v.uid, None)
            self.settle()

