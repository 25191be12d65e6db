"""The GPUs' live state through Kubernetes: the device plugin publishes NVML's readings as a node annotation at a
bounded rate; the sync hands them to the service, which avoids a hot device and ignores a bad annotation."""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from api_support import bearer, make_app
from fastapi.testclient import TestClient
from test_kube_extender import FakeApi
from test_service_gpustate import COOL, scripted_nvml

from quasched.kube.deviceplugin.livestate import HEARTBEAT_S, STATE_ANNOTATION, Publisher, decode, encode
from quasched.kube.extender import KubeOptions
from quasched.kube.sync import Sync
from quasched.service.executor.gpustate import GpuReading, Sampler


class Nodes:
    """The node annotations a publisher writes, recorded."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, str]]] = []

    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> None:
        self.patches.append((name, dict(annotations)))


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_published_on_change_else_once_a_heartbeat():
    state = [dict(COOL), dict(COOL)]
    nodes, clock = Nodes(), Clock()
    sampler = Sampler(scripted_nvml(state), Publisher(nodes, "gpu-0", clock=clock))
    sampler.once()
    for _ in range(5):  # nothing changes: no patch until the heartbeat
        clock.t += 10
        sampler.once()
    assert len(nodes.patches) == 1
    state[1]["temp"] = 90
    clock.t += 10
    sampler.once()  # device 1 is now hot: published at once
    clock.t += HEARTBEAT_S
    sampler.once()  # and again after a heartbeat
    assert len(nodes.patches) == 3 and {n for n, _ in nodes.patches} == {"gpu-0"}
    readings = decode(nodes.patches[1][1][STATE_ANNOTATION])
    assert [r.temperature_c for r in readings] == [45.0, 90.0] and readings[0].power_w == 180.5


def node(name: str, annotation: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"quasched.io/gpu-model": "A100"}}
    if annotation is not None:
        meta["annotations"] = {STATE_ANNOTATION: annotation}
    return {"metadata": meta, "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "quasched.io/gpu-shares": "200"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_sync_hands_a_nodes_readings_to_the_service(tmp_path):
    api = FakeApi()
    app, token = make_app(tmp_path, kube=KubeOptions(client=api))
    with TestClient(app) as client:
        sync = Sync(app.state.kube, api)
        now = time.time()
        hot = encode([GpuReading(0, now, temperature_c=40.0), GpuReading(1, now, temperature_c=92.0)])
        sync.apply_nodes([node("k0", hot)], complete=False)
        [k0] = [n for n in client.get("/api/v1/nodes", headers=bearer(token)).json() if n["name"] == "k0"]
        assert [g["avoided"] is not None for g in k0["gpus_live"]] == [False, True]
        assert app.state.service.ctl.state.avoided == {"k0": {1: "temperature 92 °C (avoided from 85 until below 80)"}}
        for bad in ("not json", json.dumps({"gpus": [{"device": -1, "at": now}]}), json.dumps([1]), "x" * 70_000):
            sync.apply_nodes([node("k0", bad)], complete=False)  # said once, changes nothing
        assert app.state.service.ctl.state.avoided == {"k0": {1: "temperature 92 °C (avoided from 85 until below 80)"}}
        cool = encode([GpuReading(0, now, temperature_c=40.0), GpuReading(1, now, temperature_c=60.0)])
        sync.apply_nodes([node("k0", cool)], complete=False)
        assert app.state.service.ctl.state.avoided == {"k0": {}}
        assert api.calls == []  # reading annotations calls nothing on the API server
