"""The GPUs' live state: read from NVML (a scripted stand-in ``pynvml`` with NVML's functions, units and bit masks),
judged (hot, throttling, erroring, lost; a stale reading trusted for nothing), avoided by placement while the pods on
the device keep running, its measured power swing charged by the ``power`` policy, shown by the API and exported to
/metrics in the DCGM exporter's names."""

from __future__ import annotations

import math
import time
import types
from contextlib import contextmanager
from typing import Any, Iterator

import pytest
from fastapi.testclient import TestClient

from quasched.policies.registry import parse_spec
from quasched.service.api.app import create_app
from quasched.service.domain import NodeRecord
from quasched.service.executor.gpustate import GpuReading, Judge, Limits, Sampler, read
from quasched.service.loop.controller import nodes_of
from quasched.service.loop.state import LoopOptions


class NVMLError(Exception):
    pass


class GpuIsLost(NVMLError):
    pass


class NotSupported(NVMLError):
    pass


def scripted_nvml(state: list[dict[str, Any]]) -> types.ModuleType:
    """A ``pynvml`` whose device ``i`` answers from ``state[i]`` (changed by the test between reads): ``temp`` in
    °C, ``mw`` and ``limit_mw`` in milliwatts, ``util`` %, ``used``/``total`` bytes, ``throttle`` NVML's reason
    bits, ``ecc`` the volatile uncorrected count; ``lost``: fell off the bus; a key left out is NotSupported."""
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVMLError_GpuIsLost = NVMLError, GpuIsLost
    m.nvmlDeviceGetCount = lambda: len(state)
    m.nvmlDeviceGetHandleByIndex = lambda i: i

    def field(key: str, convert: Any = lambda v: v) -> Any:
        def call(h: int, *args: Any) -> Any:
            if key not in state[h]:
                raise NotSupported(key)
            return convert(state[h][key])
        return call

    def uuid(h: int) -> str:
        if state[h].get("lost"):
            raise GpuIsLost()
        return f"GPU-{h}"

    m.nvmlDeviceGetUUID = uuid
    m.nvmlDeviceGetTemperature = field("temp")
    m.nvmlDeviceGetPowerUsage = field("mw")
    m.nvmlDeviceGetEnforcedPowerLimit = field("limit_mw")
    m.nvmlDeviceGetUtilizationRates = field("util", lambda v: types.SimpleNamespace(gpu=v, memory=0))
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=state[h]["used"], total=state[h]["total"])
    m.nvmlDeviceGetCurrentClocksThrottleReasons = field("throttle")
    m.nvmlDeviceGetTotalEccErrors = field("ecc")
    return m


COOL = {"temp": 45, "mw": 180_500, "limit_mw": 400_000, "util": 30, "used": 2 << 30, "total": 80 << 30,
        "throttle": 0x1, "ecc": 0}


def test_a_reading_in_nvmls_units_and_bits():
    nvml = scripted_nvml([COOL, {k: v for k, v in COOL.items() if k != "ecc"} | {"throttle": 0x40 | 0x4}])
    a, b = read(nvml, [0, 1], now=100.0)
    assert a == GpuReading(0, 100.0, 45.0, 180.5, 400.0, 30.0, 2048, 81920, ("gpu_idle",), 0)
    assert b.throttle == ("sw_power_cap", "hw_thermal_slowdown") and b.ecc_uncorrected is None  # not supported
    assert GpuReading.of_json(b.to_json()) == b and GpuReading.of_json(a.to_json()) == a


def test_hot_throttling_erroring_and_lost_devices_are_avoided_and_a_stale_reading_is_not_trusted():
    judge = Judge(Limits(hot_c=85, cool_c=80, stale_s=60))

    def at(device: int, **kw: Any) -> GpuReading:
        return GpuReading(device, 1000.0, **({"temperature_c": 50.0} | kw))

    assert judge.judge([at(0), at(1, temperature_c=85.0), at(2, throttle=("sw_power_cap",)),
                        at(3, throttle=("hw_thermal_slowdown",)), at(4, ecc_uncorrected=2), at(5, lost=True)],
                       now=1000.0) == {1: "temperature 85 °C (avoided from 85 until below 80)",
                                       3: "throttling: hw_thermal_slowdown", 5: "fell off the bus"}
    # cooling: still avoided at 82 (hysteresis), trusted again below 80; the ECC count grew since first seen
    assert set(judge.judge([at(1, temperature_c=82.0), at(4, ecc_uncorrected=3)], now=1000.0)) == {1, 4}
    assert judge.judge([at(1, temperature_c=79.0)], now=1000.0) == {}
    assert judge.judge([at(1, temperature_c=95.0)], now=1061.0) == {}  # 61 s old: stale, changes nothing
    assert judge.judge([at(1, temperature_c=95.0)], now=1000.0) and judge.judge([at(1)], now=1061.0)  # still


@contextmanager
def serving(tmp_path: Any, records: list[NodeRecord], **options: Any) -> Iterator[tuple[TestClient, Any, dict[str, str]]]:
    """A served app on ``records``: its client, service and an admin's headers."""
    app = create_app(f"sqlite:///{tmp_path}/q.db", nodes_of(records), token_file=tmp_path / "token",
                     options=LoopOptions(**options))
    service = app.state.service
    with TestClient(app) as client:
        yield client, service, {"Authorization": f"Bearer {service.new_admin_token}"}


@pytest.fixture
def served(tmp_path):
    with serving(tmp_path, [NodeRecord("n0", 32_000, 256_000, 2, "A100")]) as served:
        yield served


def submit(client: TestClient, headers: dict[str, str], name: str, gpus: float = 1) -> dict[str, Any]:
    body = {"name": name, "team": "default", "cpu": 1, "memory": "1GiB", "gpus": gpus}
    reply = client.post("/api/v1/jobs", json=body, headers=headers)
    assert reply.status_code == 201, reply.text
    return client.get(f"/api/v1/jobs/{reply.json()['id']}", headers=headers).json()


def test_placement_avoids_a_hot_gpu_and_the_job_on_it_keeps_running(served):
    client, service, headers = served
    state = [dict(COOL), dict(COOL)]
    sampler = Sampler(scripted_nvml(state), lambda readings: service.gpu_state("n0", readings))
    first = submit(client, headers, "first", 0.5)
    [(node, devices)] = [(p["node"], p["devices"]) for p in first["placement"]]
    state[devices[0]]["temp"] = 91  # the device under the first job heats up
    sampler.once()
    second = submit(client, headers, "second", 0.5)  # on the cool device, not beside the first
    assert second["state"] == "running" and second["placement"][0]["devices"] != devices  # the other device
    assert client.get(f"/api/v1/jobs/{first['id']}", headers=headers).json()["state"] == "running"
    state[1 - devices[0]]["throttle"] = 0x80  # the other brakes on power: neither takes a new pod
    sampler.once()
    third = submit(client, headers, "third", 0.5)
    assert third["state"] == "pending" and third["reason"]["message"] == (
        "needs 0.5 GPUs; 0 free on nodes it may use; 2 held back for their live state (heat, throttling, errors)")
    [n0] = client.get("/api/v1/nodes", headers=headers).json()
    why = {g["device"]: g["avoided"] for g in n0["gpus_live"]}
    assert why == {devices[0]: "temperature 91 °C (avoided from 85 until below 80)",
                   1 - devices[0]: "throttling: hw_power_brake_slowdown"} and not any(g["stale"] for g in n0["gpus_live"])
    metrics = client.get("/metrics", headers=headers).text
    assert f'DCGM_FI_DEV_GPU_TEMP{{Hostname="n0",gpu="{devices[0]}",modelName="A100"}} 91.0' in metrics
    assert 'DCGM_FI_DEV_POWER_USAGE{Hostname="n0",gpu="0",modelName="A100"} 180.5' in metrics
    state[devices[0]]["temp"], state[1 - devices[0]]["throttle"] = 60, 0x1  # both recover: the third job starts
    sampler.once()
    assert client.get("/api/v1/jobs?state=running", headers=headers).json().__len__() == 3
    kinds = [e["kind"] for e in client.get("/api/v1/events", headers=headers).json()]
    assert kinds.count("device-avoided") == 2 and kinds.count("device-trusted") == 2


def test_a_device_off_the_bus_is_cordoned_and_a_stale_report_changes_nothing(served):
    client, service, headers = served
    state = [dict(COOL), dict(COOL) | {"lost": True}]
    Sampler(scripted_nvml(state), lambda readings: service.gpu_state("n0", readings)).once()
    old = time.time() - 3600  # an hour old: device 0 "hot", device 1 "fine", neither trusted
    service.gpu_state("n0", [GpuReading(0, old, temperature_c=99.0), GpuReading(1, old, temperature_c=40.0)])
    [n0] = client.get("/api/v1/nodes", headers=headers).json()
    assert [(g["stale"], g["avoided"]) for g in n0["gpus_live"]] == [(True, None), (True, "fell off the bus")]
    assert submit(client, headers, "j0")["placement"][0]["devices"] == [0]
    assert submit(client, headers, "j1")["state"] == "pending"  # device 1 stays cordoned: nothing more on n0


def test_power_places_a_whole_gpu_on_the_gpu_measured_to_add_less_power(tmp_path):
    """Three one-A100 nodes (modelled swing 400 − 50 = 350 W): a fresh idle reading's limit − draw is a device's
    swing, a busy reading keeps it, a stale one forgets it (then the model's, and the tie goes by rank)."""
    records = [NodeRecord(f"n{i}", 32_000, 256_000, 1, "A100") for i in range(3)]
    with serving(tmp_path, records, policy=parse_spec("power")) as (client, service, headers):
        c = service.ctl.cluster
        tie, mid, cheap = sorted((r.name for r in records), key=lambda name: service.ctl.scheduler.rank[c.node(name)])
        state = {tie: dict(COOL, mw=50_000), mid: dict(COOL, mw=80_000), cheap: dict(COOL, mw=100_000)}
        samplers = {name: Sampler(scripted_nvml([state[name]]), lambda r, name=name: service.gpu_state(name, r))
                    for name in state}

        def swings() -> dict[str, float]:
            return {name: float(c.measured_swing_w[c.node(name), 0]) for name in state}

        for sampler in samplers.values():
            sampler.once()
        assert swings() == {tie: 350.0, mid: 320.0, cheap: 300.0}
        assert submit(client, headers, "a")["placement"][0]["node"] == cheap  # 300 W, the least
        state[cheap]["mw"] = 390_000  # busy: its draw says nothing of its idle swing
        samplers[cheap].once()
        assert swings()[cheap] == 300.0
        service.gpu_state(mid, [GpuReading(0, time.time() - 3600, power_w=10.0, power_limit_w=400.0)])  # stale
        assert math.isnan(swings()[mid]) and c.measured_devices == 2
        assert submit(client, headers, "b")["placement"][0]["node"] == tie  # 350 W each: the tie, by rank
