"""The node's GPU readings published to the API server for quasched's extender: the node annotation
:data:`STATE_ANNOTATION` (``{"gpus": [GpuReading, ...]}`` as JSON), written at a bounded rate.

A round is published when which devices look wrong changes (hot, throttling, erroring, lost: what quasched
avoids), else at most every :data:`HEARTBEAT_S`, so a stable node costs the API server one small patch a minute
(HAMi registers its devices through node annotations too). The sync (:mod:`quasched.kube.sync`) reads it back; a
reading older than quasched's staleness limit changes nothing there."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Mapping, Protocol

from quasched.service.executor.gpustate import GpuReading, Judge

#: the node annotation quasched's device plugin writes and its sync reads
STATE_ANNOTATION = "quasched.io/gpu-state"
#: longest time between two publications of a node whose devices do not change
HEARTBEAT_S = 60.0
#: the largest annotation read back (a node's few GPUs take well under 4 KiB)
MAX_STATE_BYTES = 64 << 10


class NodeAnnotator(Protocol):
    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> None: ...


class Publisher:
    """Publishes one node's readings (the sampler's ``report``): when what looks wrong changes, else every
    :data:`HEARTBEAT_S`."""

    def __init__(self, client: NodeAnnotator, node: str, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.node, self.log, self.clock = client, node, log, clock
        self.judge = Judge()
        self._last: tuple[float, dict[int, str]] | None = None

    def __call__(self, readings: list[GpuReading]) -> bool:
        """Publish ``readings`` if due; whether they were."""
        wrong = self.judge.judge(readings, max((r.at for r in readings), default=0.0))
        now = self.clock()
        if self._last is not None and self._last[1] == wrong and now - self._last[0] < HEARTBEAT_S:
            return False
        try:
            self.client.annotate_node(self.node, {STATE_ANNOTATION: encode(readings)})
        except Exception as err:  # the next round tries again
            self.log(f"cannot publish the GPUs' state on node {self.node}: {err}")
            return False
        self._last = (now, wrong)
        return True


def encode(readings: list[GpuReading]) -> str:
    return json.dumps({"gpus": [r.to_json() for r in readings]}, separators=(",", ":"))


def decode(text: Any) -> list[GpuReading]:
    """The readings of an annotation's value; ValueError naming what is wrong."""
    if not isinstance(text, str) or len(text) > MAX_STATE_BYTES:
        raise ValueError(f"{STATE_ANNOTATION}: a JSON object of at most {MAX_STATE_BYTES} bytes")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{STATE_ANNOTATION}: not JSON ({err.msg})") from None
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise ValueError(f'{STATE_ANNOTATION}: {{"gpus": [reading, ...]}} expected')
    try:
        return [GpuReading.of_json(g) for g in gpus]
    except ValueError as err:
        raise ValueError(f"{STATE_ANNOTATION}: {err}") from None
