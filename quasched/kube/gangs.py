"""Pod groups on Kubernetes (gangs): all of a group's ``minMember`` pods are placed together, or none of them.

Conventions read (docs/kubernetes.md, "Gangs"):

- the scheduler-plugins coscheduling convention, which Kubeflow's training operator writes with its
  scheduler-plugins gang option: the pod label ``scheduling.x-k8s.io/pod-group: NAME`` and a ``PodGroup``
  (``scheduling.x-k8s.io/v1alpha1``) of that name in the pod's namespace, ``spec.minMember`` and
  ``spec.scheduleTimeoutSeconds`` (its CRD: ``deploy/podgroup-crd.yaml``);
- Volcano's: the pod annotation ``scheduling.k8s.io/group-name: NAME`` and its ``PodGroup``
  (``scheduling.volcano.sh/v1beta1``, ``spec.minMember``).

The rule is the service's own for its gangs (:func:`quasched.service.loop.placing.place_together`): the members,
one scheduling cycle each, on the devices quasched chooses together, or none. What filter and bind do with it
(:class:`~.extender.Bridge`): a member's filter tries the group whole and holds every member's devices (assumed
in the loop, until the group's timeout); the members bind together, by the bind of the last one to reach bind
(kube-scheduler's Permit, which an extender does not have, kept at bind)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from quasched.kube.convention import PodError, pod_key

#: the pod label of the scheduler-plugins coscheduling convention
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: the pod annotation of Volcano's
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
#: where each convention's PodGroups are served
PODGROUP_APIS = {"coscheduling": "scheduling.x-k8s.io/v1alpha1", "volcano": "scheduling.volcano.sh/v1beta1"}
#: how long a group's members are held without all of them binding, when its PodGroup does not say
#: (coscheduling's default permit wait), and the longest accepted
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0
#: the largest ``minMember`` (the service's largest gang)
MAX_MEMBERS = 1024
#: a PodGroup's name: a DNS subdomain (RFC 1123), as the API server requires of object names
NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class GroupRef:
    """A pod's group: its namespace, name and convention (a key of :data:`PODGROUP_APIS`)."""

    namespace: str
    name: str
    convention: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def valid(self) -> bool:
        """Whether the name can be a PodGroup's (a Volcano annotation is free text: never put in a path unchecked)."""
        return NAME.fullmatch(self.name) is not None

    @property
    def path(self) -> str:
        """The PodGroup's path on the API server."""
        return f"/apis/{PODGROUP_APIS[self.convention]}/namespaces/{self.namespace}/podgroups/{self.name}"

    def member(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` belongs to this group."""
        return group_of(pod) == self


def group_of(pod: Mapping[str, Any]) -> GroupRef | None:
    """The group ``pod`` belongs to, if any (the coscheduling label first)."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    labels, annotations = meta.get("labels"), meta.get("annotations")
    label = labels.get(GROUP_LABEL) if isinstance(labels, Mapping) else None
    if isinstance(label, str) and label:
        return GroupRef(pod_key(pod)[0], label, "coscheduling")
    annotation = annotations.get(VOLCANO_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(annotation, str) and annotation:
        return GroupRef(pod_key(pod)[0], annotation, "volcano")
    return None


@dataclass(frozen=True)
class GroupSpec:
    """What a PodGroup asks: ``min_member`` pods together, held at most ``timeout_s`` until they all bind."""

    min_member: int
    timeout_s: float = DEFAULT_TIMEOUT_S


def group_spec(obj: Mapping[str, Any], ref: GroupRef) -> GroupSpec:
    """The PodGroup ``obj`` of ``ref`` read; :class:`PodError` names the field that is wrong."""
    spec = obj.get("spec") or {}
    where = f"PodGroup {ref.key}"
    members = spec.get("minMember", 1)
    if isinstance(members, bool) or not isinstance(members, int) or not 1 <= members <= MAX_MEMBERS:
        raise PodError(f"quasched: {where}: spec.minMember must be an integer from 1 to {MAX_MEMBERS}, not {members!r}")
    timeout = spec.get("scheduleTimeoutSeconds", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= MAX_TIMEOUT_S:
        raise PodError(f"quasched: {where}: spec.scheduleTimeoutSeconds must be from 1 to {MAX_TIMEOUT_S:.0f}, "
                       f"not {timeout!r}")
    return GroupSpec(members, float(timeout))


def waiting_member(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` waits to be scheduled: not bound, not ending, not finished."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return not spec.get("nodeName") and not meta.get("deletionTimestamp") and \
        status.get("phase") not in ("Succeeded", "Failed")


def placed_member(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` holds its node: bound, not finished."""
    status = pod.get("status") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and status.get("phase") not in ("Succeeded", "Failed")


def arrival(pod: Mapping[str, Any]) -> tuple[str, str]:
    """The order members are taken in: creation time, then name."""
    meta = pod.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


@dataclass
class Gang:
    """A group whose members quasched holds: their uids, the time the holds end, and who reached bind."""

    ref: GroupRef
    uids: tuple[str, ...]
    deadline: float
    arrived: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    #: the bind of the last member to arrive binds every member; from then on the gang no longer expires
    binding: bool = False
    failed: str = ""

    @property
    def complete(self) -> bool:
        return self.arrived >= set(self.uids)

    def progress(self) -> str:
        return f"{len(self.arrived)} of its {len(self.uids)} members reached bind"
