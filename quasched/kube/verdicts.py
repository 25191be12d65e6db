"""What the extender answers about a pod's nodes: filter's verdicts — the one fit rule
(:func:`quasched.model.fit.fit_checks`, as the service's loop runs it) on the controller's cluster,
the first failing check per node as one of a few stable reason strings (:data:`REASONS`, so they
aggregate in the pod's ``FailedScheduling`` event)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from quasched.kube.convention import PodError, is_managed, job_spec
from quasched.model.cluster import Cluster
from quasched.model.fit import APP_DENSITY, GPU_DEVICES, GPU_MODEL, UNSCHEDULABLE, Demand, fit_checks
from quasched.model.nodes import accessible
from quasched.model.workload import Pod
from quasched.service.domain import JobSpec
from quasched.service.loop.state import job_pod

if TYPE_CHECKING:
    from quasched.service.loop.controller import Controller

#: the stable FailedNodes strings (what users see, aggregated, in the FailedScheduling event); INVALID is
#: followed by ``: <what is wrong>`` (the field and the expected form)
NO_GPU = "quasched: not enough free GPU"
MODEL_MISMATCH = "quasched: GPU model mismatch"
UNKNOWN_NODE = "quasched: node cordoned or unknown"
OVER_QUOTA = "quasched: queue over GPU quota"
UNKNOWN_QUEUE = "quasched: unknown queue"
INVALID = "quasched: invalid GPU request"
APP_LIMIT = "quasched: app density limit"
#: a new cycle of a pod whose bind (to another node than those given) is still in flight
BINDING = "quasched: the pod's bind is in flight"
REASONS = (NO_GPU, MODEL_MISMATCH, UNKNOWN_NODE, OVER_QUOTA, UNKNOWN_QUEUE, INVALID, APP_LIMIT, BINDING,
           "quasched: insufficient cpu", "quasched: insufficient memory")


def verdicts(ctl: Controller, pod: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, str], Pod | None, list[int]]:
    """Per failing node its reason; the quasched pod; the slots of the fitting nodes (under the service lock).

    A pod quasched does not manage (no GPU request) fits every node (pod None)."""
    if not is_managed(pod):
        return {}, None, []
    got = pod_of(ctl, pod)
    if isinstance(got, str):  # the same text on every node: it aggregates into one line of the event
        return dict.fromkeys(names, got), None, []
    spec, qpod = got
    c = ctl.cluster
    found = c.slots_of(names)
    failed = {name: UNKNOWN_NODE for name, slot in zip(names, found) if slot is None}
    slots = [slot for slot in found if slot is not None]
    wanted = [name for name, slot in zip(names, found) if slot is not None] if failed else list(names)
    if not slots:
        return failed, qpod, []
    idx = np.asarray(slots, dtype=np.int64)
    pending = np.ones(len(idx), dtype=bool)
    for check, ok in fit_checks(c, Demand.of([qpod]), idx, detail=True):
        failing = np.flatnonzero(pending & ~ok[0]).tolist()
        if failing:
            per_node = check == GPU_MODEL  # the only check whose reason depends on the node
            text = "" if per_node else reason(c, check, qpod, spec, int(idx[failing[0]]))
            for i in failing:
                failed[wanted[i]] = reason(c, check, qpod, spec, int(idx[i])) if per_node else text
        pending &= ok[0]
    return failed, qpod, idx[pending].tolist()


def pod_of(ctl: Controller, pod: Mapping[str, Any]) -> tuple[JobSpec, Pod] | str:
    """The job standing for a managed ``pod`` and the pod quasched places, restricted to the GPU models its queue
    admits now; or the stable reason it cannot be placed (an invalid request, an unknown queue)."""
    try:
        spec = job_spec(pod)
    except PodError as err:
        return f"{INVALID}: {err}"
    if spec.team not in ctl.quota.queues:
        return UNKNOWN_QUEUE
    models = [m for m in ctl.cluster.models if m and accessible(m, spec.gpu_model)]
    admitted = [m for m in models if ctl.quota.admits(spec.team, m, spec.gpu_request)]
    qpod = job_pod(spec, local_node=ctl.options.local_node)
    if len(admitted) != len(models):
        qpod = replace(qpod, gpu_model="|".join(admitted) or "\0none")
    return spec, qpod


def reason(c: Cluster, check: str, qpod: Pod, spec: JobSpec, slot: int) -> str:
    """The stable reason string of the first fit check ``check`` that ``qpod`` fails on node ``slot``."""
    if check == UNSCHEDULABLE:
        return UNKNOWN_NODE
    if check == GPU_MODEL:
        if c.num_gpus[slot] == 0:
            return NO_GPU
        model = str(c.models[c.model_id[slot]])
        return OVER_QUOTA if accessible(model, spec.gpu_model) else MODEL_MISMATCH
    if check == GPU_DEVICES:
        return NO_GPU
    if check == APP_DENSITY:
        return APP_LIMIT
    return f"quasched: insufficient {check}"
