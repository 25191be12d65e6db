"""This machine as a node: which node it is, its GPUs and their health from NVML (a stand-in ``pynvml``
module with the functions NVML's binding has), the devices a job's environment names, and a store
written before jobs had commands read after the upgrade."""

from __future__ import annotations

import sqlite3
import sys
import types
from dataclasses import dataclass

import pytest

from quasched.service.domain import Job, JobSpec, JobState
from quasched.service.executor import localnode
from quasched.service.executor.commands import LocalGpus, job_env
from quasched.service.executor.localnode import HealthWatch, model_name, nvml_record, this_node


class NVMLError(Exception):
    pass


class GpuIsLost(NVMLError):
    pass


@dataclass
class Event:
    device: int
    eventData: int


def fake_nvml(uuids: list[str], events: list[Event], lost: set[int]) -> types.ModuleType:
    """A ``pynvml`` whose devices are ``uuids`` (16 GiB each); ``events`` come one per wait; devices in ``lost``
    have fallen off the bus."""
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVMLError_GpuIsLost, m.nvmlEventTypeXidCriticalError = NVMLError, GpuIsLost, 8
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: len(uuids)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA A100-SXM4-80GB"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=16 << 30)

    def uuid(h: int) -> str:
        if h in lost:
            raise GpuIsLost()
        return uuids[h]

    def wait(_set: object, _ms: int) -> Event:
        if not events:
            raise NVMLError("timeout")
        return events.pop(0)

    m.nvmlDeviceGetUUID, m.nvmlEventSetWait_v2 = uuid, wait
    m.nvmlEventSetCreate = lambda: object()
    m.nvmlDeviceRegisterEvents = lambda h, kinds, s: None
    return m


def test_this_node_by_option_host_name_or_only_node(monkeypatch):
    monkeypatch.setattr(localnode.socket, "gethostname", lambda: "gpu7.lab.example")
    assert this_node(["a", "b"], "b") == "b"
    assert this_node(["gpu6", "gpu7"], "") == "gpu7"  # the short host name
    assert this_node(["solo"], "") == "solo"
    assert this_node(["a", "b"], "") is None  # bookkeeping only
    with pytest.raises(ValueError, match="--local-node 'c': no such node"):
        this_node(["a", "b"], "c")


def test_nvml_gives_the_node_and_device_names(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["GPU-aa", "GPU-bb"], [], set()))
    record = nvml_record("box")
    assert (record.num_gpus, record.gpu_model, record.labels) == (2, "A100-SXM4-80GB", {"gpu-memory": "16384Mi"})
    assert model_name("NVIDIA GeForce RTX 4090") == "GeForce-RTX-4090"
    gpus = localnode.local_gpus(record)
    job = Job(1, JobSpec("j", "t", 1000, 1024, 1, 250, command=("true",)), 0, 0.0, 1, JobState.RUNNING,
              placement=[("box", (1,))])
    env = job_env(job, gpus, {})
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == "GPU-bb"
    assert (env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], env["QUASCHED_GPU_MEMORY_MIB"]) == ("25", "4096")
    assert job_env(job, LocalGpus(), {})["CUDA_VISIBLE_DEVICES"] == "1"  # no NVML: the index


def test_without_nvml_nothing_is_discovered(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert nvml_record("box") is None and HealthWatch(lambda d, ok: None).start() is False


def test_critical_xids_and_a_lost_device_mark_devices_unhealthy():
    events = [Event(device=2, eventData=13), Event(device=1, eventData=79), Event(device=1, eventData=48)]
    nvml = fake_nvml(["GPU-0", "GPU-1", "GPU-2", "GPU-3"], events, lost=set())
    marked: list[tuple[int, bool]] = []
    watch = HealthWatch(lambda device, ok: marked.append((device, ok)))
    for _ in range(3):
        watch.check(nvml, [0, 1, 2, 3], ["GPU-0", "GPU-1", "GPU-2", "GPU-3"], None)
    assert marked == [(1, False)]  # XID 13 is the application's; 79 (fell off the bus) marks once
    lost = fake_nvml(["GPU-0", "GPU-1", "GPU-2", "GPU-3"], [], lost={3})
    watch.check(lost, [0, 1, 2, 3], ["GPU-0", "GPU-1", "GPU-2", "GPU-3"], None)
    assert marked == [(1, False), (3, False)]


def test_a_store_from_before_commands_upgrades(tmp_path):
    """A database at the first schema with a running job: after the upgrade the job has no command, no exit
    code and no usage yet, and runs on as before."""
    from alembic import command
    from sqlalchemy import create_engine

    from quasched.service.store.database import Store, alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with create_engine(url).begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
    with sqlite3.connect(tmp_path / "old.db") as db:
        db.execute("INSERT INTO jobs (id, seq, name, team, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_model, "
                   "pods, user, app, max_per_node, priority_class, priority, submitted_at, state, started_at, "
                   "placement, quota_model, solver, restarts) VALUES (1, 1, 'old', 'default', 1000, 1024, 1, 1000, "
                   "'', 1, '', '', -1, 'normal', 100, 5.0, 'running', 6.0, '[{\"node\": \"n\", \"devices\": [0]}]', "
                   "'', '', 0)")
    _, _, jobs = Store(url).load()
    assert len(jobs) == 1
    job = jobs[0]
    assert (job.spec.command, job.spec.env, job.spec.workdir, job.spec.time_limit_s) == ((), (), "", None)
    assert (job.exit_code, job.wall_s, job.gpu_hours, job.placement) == (None, 0.0, 0.0, [("n", (0,))])
    assert job.usage(3606.0) == (3600.0, 1.0)  # one GPU for an hour
