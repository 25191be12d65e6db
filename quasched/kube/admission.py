"""The checks bind runs before it books devices or writes to the API server (docs/kubernetes.md, "Bind's checks").

- The pod is read from the API server, never taken from the request: it must exist, carry the uid
  kube-scheduler sent, name one of quasched's scheduler profiles, not be being deleted, not be bound
  elsewhere, and ask quasched for GPUs (:func:`bind_refusal`).
- The replica must be the active one: kube-scheduler's leader Lease must be held by this replica's own
  kube-scheduler (:func:`held_by`). kube-scheduler's identity in the Lease is ``<host name>_<uuid>``, and
  the kube-scheduler and quasched containers of one pod share the host name (the pod's name).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from quasched.kube.convention import is_managed, pod_key


def bind_refusal(pod: Mapping[str, Any], uid: str, node: str, scheduler_names: Sequence[str]) -> str | None:
    """Why ``pod`` (as the API server has it) must not be bound to ``node`` for a bind naming ``uid``; None: it may.

    A pod already bound to ``node`` passes (a repeated bind); the caller answers it without a new Binding."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    if pod_key(pod)[2] != uid:
        return f"its uid is {pod_key(pod)[2] or 'unknown'}, not {uid} (the pod was replaced)"
    scheduler = str(spec.get("schedulerName") or "default-scheduler")
    if scheduler not in scheduler_names:
        return f"its schedulerName is {scheduler!r}, not quasched's ({', '.join(scheduler_names)})"
    if meta.get("deletionTimestamp"):
        return "it is being deleted"
    bound = spec.get("nodeName")
    if bound and bound != node:
        return f"it is already bound to {bound}"
    if not is_managed(pod):
        return "it requests no GPU from quasched (kube-scheduler binds such pods itself: managedResources)"
    return None


def lease_holder(lease: Mapping[str, Any]) -> str:
    """The ``spec.holderIdentity`` of a ``coordination.k8s.io/v1`` Lease ('' when nobody holds it)."""
    spec = lease.get("spec") or {}
    return str(spec.get("holderIdentity") or "") if isinstance(spec, Mapping) else ""


def held_by(holder: str, identity: str) -> bool:
    """Whether the Lease holder ``holder`` is the kube-scheduler whose identity starts with ``identity``
    (kube-scheduler writes ``<host name>_<uuid>``; ``identity`` is the host name)."""
    return bool(identity) and (holder == identity or holder.startswith(identity + "_"))
