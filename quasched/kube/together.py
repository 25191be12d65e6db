"""Filter and bind for the members of pod groups (:mod:`.gangs`): held together, bound together.

- **Filter** of a member whose group quasched does not hold yet reads the group (its PodGroup and its pods, from the
  API server, outside the lock). If fewer than ``minMember`` members exist, or they do not fit together now, every
  node fails with one reason naming the group and what it waits for (one line of the ``FailedScheduling`` event)
  and nothing is held. Else the members are placed by the one all-or-nothing rule
  (:func:`~quasched.service.loop.placing.place_together`: this pod first, then the others by creation), every
  member's devices are assumed in the loop until the group's timeout, and this pod gets its node; the others are
  annotated (:data:`~.convention.GANG_HOLD_ANNOTATION`) so kube-scheduler tries them at once, and their filter answers the
  node held for them.
- **Bind** of a held member waits (at most :data:`BARRIER_S`, inside the extender's HTTP timeout) for the bind of
  every member; the last to arrive binds them all (their jobs stored, one Binding each). A member whose wait ran
  out answers an error and stays held: kube-scheduler retries it, and it is bound with the others when the last
  arrives. A group not bound by its timeout is released whole (no member bound, nothing held).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np

from quasched.kube.admission import bind_refusal
from quasched.kube.convention import GANG_HOLD_ANNOTATION, PodError, is_managed, pod_key
from quasched.kube.gangs import Gang, GroupRef, GroupSpec, arrival, group_spec, placed_member, waiting_member
from quasched.kube.reservations import Hold, requeue
from quasched.kube.verdicts import pod_of
from quasched.model.workload import Pod
from quasched.service.domain import Job, JobSpec
from quasched.service.loop.placing import place_together

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

#: longest wait of a member's bind for the other members' (kube-scheduler's extender HTTP timeout is 5 s)
BARRIER_S = 2.0
#: cluster uids of a group's trial placement (rolled back at once; far below the assumptions' own)
TRIAL_UID = -(1 << 60)


class GroupClient(Protocol):
    """What a group needs from the API server (:class:`~.client.KubernetesClient` has it)."""

    def get_pod_group(self, ref: GroupRef) -> dict[str, Any]: ...

    def group_pods(self, ref: GroupRef) -> list[dict[str, Any]]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...


class Members(Protocol):
    """What groups need of the extender's bridge (:class:`~.extender.Bridge`): its holds and how a held pod binds."""

    service: Service
    holds: dict[str, Hold]

    @property
    def scheduler_names(self) -> tuple[str, ...]: ...

    @property
    def client(self) -> Any: ...

    def _assume(self, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, node: str, devices: tuple[int, ...],
                ttl_s: float = ...) -> Hold | None: ...

    def drop_hold(self, uid: str) -> Hold | None: ...

    def job_of(self, uid: str) -> Job | None: ...

    def release(self, uid: str, outcome: str, why: str = "") -> Job | None: ...

    def start_binding(self, held: Hold) -> None: ...

    def binding_starts(self, uid: str) -> None: ...

    def binding_ends(self, uid: str) -> None: ...

    def confirm(self, held: Hold) -> tuple[Job, tuple[int, ...]]: ...

    def _create_binding(self, namespace: str, name: str, uid: str, node: str, job: Job,
                        devices: tuple[int, ...]) -> str: ...


class Together:
    """The pod groups the bridge holds (by group key, and each member's uid to its group)."""

    def __init__(self, bridge: Members) -> None:
        self.bridge = bridge
        self.gangs: dict[str, Gang] = {}
        self.of_uid: dict[str, str] = {}
        self.changed = threading.Condition(bridge.service.lock)

    # ------------------------------------------------------------ filter
    def filter(self, pod: Mapping[str, Any], ref: GroupRef,
               names: Sequence[str]) -> tuple[list[str], dict[str, str]] | None:
        """(Not under the lock.) The node held for member ``pod``, or why none is; None: the group has its minimum
        bound already, the pod is placed alone."""
        service, uid = self.bridge.service, pod_key(pod)[2]
        with service.lock:
            early = self._known(uid, ref, names)
        if early is not None:
            return early
        read = self._read(ref)
        if isinstance(read, str):
            return [], dict.fromkeys(names, read)
        spec, pods = read
        with service.lock:
            early = self._known(uid, ref, names)  # (held meanwhile, by another member's filter)
            if early is not None:
                return early
            bridge = self.bridge
            members: dict[str, Mapping[str, Any]] = {pod_key(p)[2]: p for p in pods if self._ours(p)}
            if placed_member(members.get(uid, {})) or bridge.job_of(uid) is not None:
                return [], dict.fromkeys(names, f"quasched: pod {pod_key(pod)[1]} is bound already")
            members[uid] = pod
            # placed: bound as the API server says, or running as quasched's books say (a read may lag them)
            placed = {u for u, p in members.items() if u != uid and (placed_member(p) or bridge.job_of(u) is not None)}
            others = sorted((p for u, p in members.items() if u != uid and u not in placed and u not in bridge.holds
                             and waiting_member(p)), key=arrival)
            free = [p for p in others if not is_managed(p)]  # no quasched resource: kube-scheduler places them
            need = spec.min_member - len(placed) - len(free)
            if need <= 0:
                return None
            others = [p for p in others if is_managed(p)]
            if 1 + len(others) < need:
                return [], dict.fromkeys(names, f"quasched: pod group {ref.key} waits for its members: "
                                                f"{len(placed) + len(free) + 1 + len(others)} of minMember "
                                                f"{spec.min_member} exist")
            chosen = [pod, *others[:need - 1]]
            answer = self._hold(ref, spec, chosen, names)
            if not answer[1]:
                self._requeue(chosen[1:])
        return answer

    def _known(self, uid: str, ref: GroupRef, names: Sequence[str]) -> tuple[list[str], dict[str, str]] | None:
        """(Under the lock.) The answer when the group is held already: this member's node, or, for a member the
        hold does not include, to wait until those bind (a group is held once at a time); None: not held."""
        self.expire()
        key = self.of_uid.get(uid)
        if key is not None and key in self.gangs:
            return self._held(uid, names)
        if ref.key in self.gangs:
            gang = self.gangs[ref.key]
            return [], dict.fromkeys(names, f"quasched: pod group {ref.key} is held for {len(gang.uids)} of its "
                                            "members; this one is placed once they are bound")
        return None

    def _ours(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` is scheduled by quasched's kube-scheduler (a member another scheduler places is none of
        quasched's to hold or bind)."""
        return (pod.get("spec") or {}).get("schedulerName") in self.bridge.scheduler_names

    def _read(self, ref: GroupRef) -> tuple[GroupSpec, list[dict[str, Any]]] | str:
        """The group's PodGroup and pods from the API server, or why they cannot be read."""
        client: GroupClient | None = self.bridge.client
        if client is None:
            return f"quasched: pod group {ref.key}: no Kubernetes API client to read it"
        if not ref.valid:
            return "quasched: invalid pod group name: an object name (lower-case letters, digits, '-' and '.')"
        try:
            return group_spec(client.get_pod_group(ref), ref), client.group_pods(ref)
        except PodError as err:
            return str(err)
        except LookupError as err:
            return f"quasched: pod group {ref.key} waits for its PodGroup: {err}"
        except Exception as err:
            return f"quasched: pod group {ref.key}: cannot read it: {type(err).__name__}"

    def _held(self, uid: str, names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """(Under the lock.) The node held for member ``uid``, if kube-scheduler's filters left it a candidate."""
        gang = self.gangs[self.of_uid[uid]]
        held = self.bridge.holds.get(uid)
        if held is not None and held.node in names:
            return [held.node], {}
        where = held.node if held is not None else "nothing"
        return [], dict.fromkeys(names, f"quasched: pod group {gang.ref.key} holds {where} for this pod, "
                                        "not among the nodes given")

    def _hold(self, ref: GroupRef, spec: GroupSpec, chosen: list[Mapping[str, Any]],
              names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """(Under the lock.) Place ``chosen`` together, by the one rule, and hold each member's devices; the first's
        node, or why the group does not fit."""
        bridge, ctl = self.bridge, self.bridge.service.ctl
        specs, qpods = [], []
        for member in chosen:
            got = pod_of(ctl, member)
            if isinstance(got, str):
                return [], dict.fromkeys(names, f"quasched: pod group {ref.key}: member {pod_key(member)[1]}: {got}")
            specs.append(got[0])
            qpods.append(got[1])
        c = ctl.cluster
        trial = [replace(q, uid=TRIAL_UID - k) for k, q in enumerate(qpods)]
        first = np.asarray([slot for slot in c.slots_of(names) if slot is not None], dtype=np.int64)
        placed = place_together(ctl.scheduler, trial, counted=False, first=first)
        for p, _, _ in placed:
            c.remove(p)
        gpus = sum(q.gpu_request for q in qpods) / 1000
        nodes = [str(c.names[node]) for _, node, _ in placed]
        if not placed or not self._admitted(qpods, [node for _, node, _ in placed]):
            return [], dict.fromkeys(names, f"quasched: pod group {ref.key} waits: its {len(chosen)} pods "
                                            f"({gpus:g} GPUs) do not fit together now")
        holds: list[Hold] = []
        for member, job, qpod, node, (_, _, devices) in zip(chosen, specs, qpods, nodes, placed):
            held = bridge._assume(member, qpod, job, node, devices, ttl_s=spec.timeout_s)
            if held is None:  # (cannot happen: the trial just placed them) release what was taken
                for h in holds:
                    bridge.drop_hold(pod_key(h.pod)[2])
                return [], dict.fromkeys(names, f"quasched: pod group {ref.key} waits: its pods do not fit together now")
            holds.append(held)
        uids = tuple(pod_key(m)[2] for m in chosen)
        self.gangs[ref.key] = Gang(ref, uids, bridge.service.clock() + spec.timeout_s)
        self.of_uid.update(dict.fromkeys(uids, ref.key))
        return [nodes[0]], {}

    def _admitted(self, qpods: list[Any], slots: list[int]) -> bool:
        """Whether each queue's quota admits its members' GPUs together, per GPU model they were placed on."""
        ctl = self.bridge.service.ctl
        c, wanted = ctl.cluster, dict[tuple[str, str], int]()
        for qpod, slot in zip(qpods, slots):
            key = (qpod.team, str(c.models[c.model_id[slot]]))
            wanted[key] = wanted.get(key, 0) + qpod.gpu_request
        return all(ctl.quota.admits(team, model, milli) for (team, model), milli in wanted.items() if milli)

    def _requeue(self, members: Sequence[Mapping[str, Any]]) -> None:
        """(Under the lock.) Annotate the members held for their group (in a thread: filter does not wait): a pod's
        update makes kube-scheduler try it at once, instead of after its back-off."""
        client: GroupClient | None = self.bridge.client
        holds = self.bridge.holds
        requeue(client, [(*pod_key(m), {GANG_HOLD_ANNOTATION: h.node if (h := holds.get(pod_key(m)[2])) else ""})
                         for m in members], name="quasched-gang-requeue")

    # ------------------------------------------------------------ bind
    def bind(self, uid: str, namespace: str, name: str, node: str) -> dict[str, str] | None:
        """Bind of a held member: wait for the others, the last binds all; None: ``uid`` is not a held member."""
        bridge, service = self.bridge, self.bridge.service
        with service.lock:
            self.expire()
            key = self.of_uid.get(uid)
            if key is None:
                return None
            gang = self.gangs.get(key)
            if gang is None:
                del self.of_uid[uid]
                return None
            held = bridge.holds.get(uid)
            if held is None or held.node != node or pod_key(held.pod)[:2] != (namespace, name):
                where = held.node if held is not None else "nothing"
                return {"Error": f"quasched: pod group {key} holds {where} for {namespace}/{name}, not {node}"}
            refused = bind_refusal(held.pod, uid, node, bridge.scheduler_names)
            if refused:
                return {"Error": f"quasched: refused to bind {namespace}/{name}: {refused}"}
            gang.arrived.add(uid)
            lead = gang.complete and not gang.binding
            todo: list[Hold] = []
            if lead:
                gang.binding = True
                todo = [bridge.holds[u] for u in gang.uids]
                for h in todo:
                    bridge.start_binding(h)
                    bridge.binding_starts(pod_key(h.pod)[2])
        if lead:
            self._bind_all(gang, todo)
        with service.lock:
            deadline = time.monotonic() + BARRIER_S
            while uid not in gang.bound and not gang.failed and (left := deadline - time.monotonic()) > 0:
                self.changed.wait(left)
            if uid in gang.bound:
                return {"Error": ""}
            if gang.failed:
                return {"Error": gang.failed}
            return {"Error": f"quasched: pod group {key} binds its members together: {gang.progress()} "
                             "(this one stays held; bound when the last arrives)"}

    def _bind_all(self, gang: Gang, holds: list[Hold]) -> None:
        """(Not under the lock.) Every member's job stored first, then every member's Binding: a store that refuses
        one member cancels them all, before any is bound; the group then ends."""
        bridge, booked = self.bridge, []
        try:
            for held in holds:
                booked.append((held, *bridge.confirm(held)))
        except Exception as err:  # PodError, or the database: nothing is bound, every member stored is cancelled
            gang.failed = f"quasched: pod group {gang.ref.key}: {err}; no member bound, tried again"
            for held, _, _ in booked:
                bridge.release(pod_key(held.pod)[2], "cancelled")
            booked = []
        try:
            for held, job, devices in booked:
                namespace, name, uid = pod_key(held.pod)
                failed = bridge._create_binding(namespace, name, uid, held.node, job, devices)
                if failed:  # the API server refused one (e.g. the pod went): the ones before it are bound
                    gang.failed = f"quasched: pod group {gang.ref.key}: {failed}"
                    break
                with bridge.service.lock:
                    gang.bound.add(uid)
                    self.changed.notify_all()
        finally:
            with bridge.service.lock:
                for held in holds:
                    uid = pod_key(held.pod)[2]
                    bridge.binding_ends(uid)
                    if bridge.holds.get(uid) is held:
                        bridge.drop_hold(uid)
                self._end(gang)
                self.changed.notify_all()

    # ------------------------------------------------------------ ends
    def expire(self) -> None:
        """(Under the lock.) Release whole each group past its timeout, or that lost a member's hold (its pod went,
        its node or a device under it), unless its binds are under way."""
        now = self.bridge.service.clock()
        for gang in list(self.gangs.values()):
            lost = [u for u in gang.uids if u not in self.bridge.holds]
            if not gang.binding and (gang.deadline <= now or lost):
                for uid in gang.uids:
                    self.bridge.drop_hold(uid)
                gang.failed = f"quasched: pod group {gang.ref.key} was released: " + (
                    "a member's hold ended (its pod, node or a device went)" if lost and gang.deadline > now
                    else "not every member reached bind in time")
                self._end(gang)
                self.changed.notify_all()

    def _end(self, gang: Gang) -> None:
        if self.gangs.get(gang.ref.key) is gang:
            del self.gangs[gang.ref.key]
        for uid in gang.uids:
            if self.of_uid.get(uid) == gang.ref.key:
                del self.of_uid[uid]
