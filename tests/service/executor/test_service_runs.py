"""Jobs with a command run on this machine's node: real processes (``python -c``) on a cluster whose
node ``box`` is this machine with four fake GPUs, as a throw-away user (as root; else as the tests' account).
The environment each sees, exit codes, logs (API, CLI, follow), SIGTERM then SIGKILL on cancel, preemption
and time limit, usage; a command job waits for box rather than land on the other node; nothing left running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from accounts import command_accounts, job_python, shared_dir
from api_support import bearer, job_body, live_server, make_app
from typer.testing import CliRunner

from quasched.cli import app as cli_app
from quasched.model.nodes import NodeSpec
from quasched.policies.registry import parse_spec
from quasched.service.executor.commands import start_ticks
from quasched.service.loop.state import LoopOptions

pytestmark = pytest.mark.slow  # real jobs under a real server

PY = job_python()
#: seconds an HTTP call may take (several test runs share two cores)
HTTP_S = 30
ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "QUASCHED_GPU_MEMORY_MIB", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "MY_VAR")
SHOW_ENV = f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS!r}}}))"
#: prints TERM when it gets SIGTERM and keeps running (only SIGKILL ends it)
STUBBORN = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True))\n"
            "print('up', flush=True)\n"
            "while True: time.sleep(0.05)")
#: exits 143 on SIGTERM
POLITE = "import time; print('up', flush=True); time.sleep(60)"


def box_cluster() -> NodeSpec:
    """``box``: this machine, 4 fake GPUs of 16 GiB; ``far``: another machine (bookkeeping only)."""
    return NodeSpec(name=np.array(["box", "far"], dtype=object), cpu_milli=np.array([8000, 8000]),
                    memory_mib=np.array([32768, 32768]), num_gpus=np.array([4, 4]),
                    gpu_model=np.array(["T4", "T4"], dtype=object),
                    labels=np.array([{"gpu-memory": "16Gi"}, {}], dtype=object))


@pytest.fixture(scope="module")
def accounts():
    """Who runs the commands: one throw-away user for every team (as root)."""
    with command_accounts() as run_as:
        yield run_as


@pytest.fixture
def jobs_dir():
    """The jobs' own directories, where their users reach them."""
    path = shared_dir()
    yield path
    shutil.rmtree(path)


@pytest.fixture
def served(tmp_path, monkeypatch, accounts, jobs_dir):
    """(base URL, admin headers, state dir) of a live server running the commands of jobs on ``box`` (NVML hidden:
    the same devices on a machine with GPUs)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    application, token = make_app(tmp_path, clock=time.time, cluster=box_cluster(), state_dir=tmp_path / "state",
                                  options=LoopOptions(local_node="box", grace_s=2.0, policy=parse_spec("bestfit")),
                                  run_as=accounts, jobs_dir=jobs_dir)
    with live_server(application) as base:
        yield base, bearer(token), tmp_path / "state"
    assert_no_process_left(tmp_path / "state")


def assert_no_process_left(state: Path) -> None:
    for record in (state / "jobs").glob("*.run.json"):
        run = json.loads(record.read_text())
        if run["pid"] and start_ticks(run["pid"]) == run["ticks"]:
            os.killpg(run["pid"], signal.SIGKILL)
            raise AssertionError(f"{record.name}: process {run['pid']} still runs")


def submit(base: str, headers: dict[str, str], code: str, **kw: object) -> dict:
    body = job_body(name=kw.pop("name", "j"), cpu=1, memory="1GiB", command=[PY, "-c", code], **kw)
    r = httpx.post(f"{base}/api/v1/jobs", json=body, headers=headers, timeout=HTTP_S)
    assert r.status_code == 201, r.text
    return r.json()


def wait(base: str, headers: dict[str, str], job_id: int, *states: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = httpx.get(f"{base}/api/v1/jobs/{job_id}", headers=headers, timeout=HTTP_S).json()
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, f"job {job_id} stayed {job['state']}: {job}"
        time.sleep(0.05)


def log(base: str, headers: dict[str, str], job_id: int) -> str:
    r = httpx.get(f"{base}/api/v1/jobs/{job_id}/logs", headers=headers, timeout=HTTP_S)
    assert r.status_code == 200, r.text
    return r.text


def wait_log(base: str, headers: dict[str, str], job_id: int, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in log(base, headers, job_id):
        assert time.monotonic() < deadline, log(base, headers, job_id)
        time.sleep(0.05)


def test_commands_see_their_devices_and_end_by_exit_code(served):
    base, headers, _ = served
    whole = submit(base, headers, SHOW_ENV, gpus=2, env={"MY_VAR": "x y"})
    share = submit(base, headers, SHOW_ENV, gpus=0.5)
    cpu = submit(base, headers, SHOW_ENV, gpus=0)
    bad = submit(base, headers, "import sys; print('boom', file=sys.stderr); sys.exit(3)", gpus=1)
    seen = {}
    for job in (whole, share, cpu):
        done = wait(base, headers, job["id"], "succeeded", "failed")
        assert done["state"] == "succeeded" and done["exit_code"] == 0, done
        seen[job["id"]] = (done, json.loads(log(base, headers, job["id"]).splitlines()[-1]))
    env = seen[whole["id"]][1]
    devices = ",".join(map(str, whole["placement"][0]["devices"]))  # where it started (a finished job holds none)
    assert whole["placement"][0]["node"] == "box" and len(whole["placement"][0]["devices"]) == 2
    assert env == {"CUDA_VISIBLE_DEVICES": devices, "NVIDIA_VISIBLE_DEVICES": devices, "MY_VAR": "x y",
                   "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": None, "QUASCHED_GPU_MEMORY_MIB": None,
                   "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": None}
    env = seen[share["id"]][1]
    assert env["CUDA_VISIBLE_DEVICES"] == str(share["placement"][0]["devices"][0])
    assert (env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], env["QUASCHED_GPU_MEMORY_MIB"]) == ("50", "8192")
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert seen[cpu["id"]][1]["CUDA_VISIBLE_DEVICES"] == "" and seen[cpu["id"]][1]["NVIDIA_VISIBLE_DEVICES"] == "void"
    failed = wait(base, headers, bad["id"], "failed")
    assert failed["exit_code"] == 3 and failed["reason"]["code"] == "NonZeroExit"
    assert "exited with code 3" in failed["reason"]["message"] and "boom" in failed["reason"]["evidence"]["log_tail"]
    # usage: wall time per job, GPU-hours = GPUs held x hours, summed per team
    jobs = [wait(base, headers, j["id"], "succeeded", "failed") for j in (whole, share, cpu, bad)]
    for job, gpus in zip(jobs, (2, 0.5, 0, 1)):
        assert job["wall_s"] == pytest.approx(job["finished_at"] - job["started_at"])
        assert job["gpu_hours"] == pytest.approx(job["wall_s"] * gpus / 3600)
    usage = {u["team"]: u for u in httpx.get(f"{base}/api/v1/usage", headers=headers).json()}
    assert usage["default"]["jobs"] == 4 and usage["default"]["running"] == 0
    assert usage["default"]["gpu_hours"] == pytest.approx(sum(j["gpu_hours"] for j in jobs))


def test_a_command_waits_for_this_machine_and_a_job_without_one_is_bookkeeping(served):
    base, headers, _ = served
    first = submit(base, headers, POLITE, gpus=4)
    assert first["placement"][0]["node"] == "box"
    wait_log(base, headers, first["id"], "up")
    second = submit(base, headers, "print('second ran')", gpus=4)  # box is full: it waits, never runs on far
    assert second["state"] == "pending" and second["placement"] == []
    assert second["reason"]["message"] == "needs 4 GPUs; 0 free on nodes it may use"  # box's room, not far's
    far = httpx.post(f"{base}/api/v1/jobs", headers=headers, json=job_body(cpu=1, memory="1GiB", gpus=4)).json()
    assert far["placement"][0]["node"] == "far" and far["state"] == "running"  # no command: it may go elsewhere
    assert httpx.post(f"{base}/api/v1/jobs/{first['id']}/cancel", headers=headers).status_code == 200
    done = wait(base, headers, second["id"], "succeeded")
    assert [e["node"] for e in done["events"] if e["kind"] == "started"] == ["box"]
    assert "second ran" in log(base, headers, second["id"])
    assert httpx.get(f"{base}/api/v1/jobs/{far['id']}/logs", headers=headers).status_code == 404
    plain = httpx.post(f"{base}/api/v1/jobs", headers=headers, json=job_body(cpu=1, memory="1GiB", gpus=0)).json()
    assert httpx.get(f"{base}/api/v1/jobs/{plain['id']}/logs", headers=headers).status_code == 404
    assert httpx.post(f"{base}/api/v1/jobs/{far['id']}/complete", headers=headers).json()["state"] == "succeeded"
    # a log is its team's (and admins'): another team's token is refused
    assert httpx.put(f"{base}/api/v1/queues/other", json={}, headers=headers).status_code == 200
    other = httpx.post(f"{base}/api/v1/tokens", json={"name": "o", "team": "other"}, headers=headers).json()["token"]
    assert httpx.get(f"{base}/api/v1/jobs/{second['id']}/logs", headers=bearer(other)).status_code == 403
    assert httpx.get(f"{base}/api/v1/jobs/999/logs", headers=headers).status_code == 404


def test_cancel_sends_sigterm_then_sigkill(served):
    base, headers, state = served
    stubborn, polite = submit(base, headers, STUBBORN, gpus=1), submit(base, headers, POLITE, gpus=1)
    for job in (stubborn, polite):
        wait_log(base, headers, job["id"], "up")
    r = httpx.post(f"{base}/api/v1/jobs/{polite['id']}/cancel", headers=headers)
    assert r.json()["state"] == "stopping" and r.json()["reason"]["code"] == "Cancelling"
    done = wait(base, headers, polite["id"], "cancelled")
    assert done["exit_code"] == -signal.SIGTERM  # ended by SIGTERM, within the grace period
    assert httpx.post(f"{base}/api/v1/jobs/{stubborn['id']}/cancel", headers=headers).json()["state"] == "stopping"
    wait_log(base, headers, stubborn["id"], "TERM")  # it got SIGTERM and ignored it
    assert wait(base, headers, stubborn["id"], "cancelled")["exit_code"] is None  # SIGKILL after the grace period
    pid = json.loads((state / "jobs" / f"{stubborn['id']}.run.json").read_text())["pid"]
    deadline = time.monotonic() + 5
    while start_ticks(pid) is not None:
        assert time.monotonic() < deadline, "the stubborn job survived SIGKILL"
        time.sleep(0.05)


def test_preemption_and_time_limit_stop_the_process(served):
    base, headers, _ = served
    low = submit(base, headers, POLITE, gpus=4, priority_class="low")
    wait_log(base, headers, low["id"], "up")
    filler = httpx.post(f"{base}/api/v1/jobs", headers=headers,  # far is full too (a command would wait for box)
                        json=job_body(name="far-filler", cpu=1, memory="1GiB", gpus=4)).json()
    assert filler["placement"][0]["node"] == "far"
    high = submit(base, headers, "print('high ran')", gpus=4, priority_class="high")
    requeued = wait(base, headers, low["id"], "pending")
    assert requeued["restarts"] == 1 and requeued["exit_code"] == -signal.SIGTERM
    done = wait(base, headers, high["id"], "succeeded")
    assert [e["node"] for e in done["events"] if e["kind"] == "started"] == ["box"]
    assert "high ran" in log(base, headers, high["id"])
    wait(base, headers, low["id"], "running")  # runs again on box once the preemptor is done
    wait_log(base, headers, low["id"], "run 2 of job")
    limited = submit(base, headers, STUBBORN, gpus=0, time_limit="1s")
    failed = wait(base, headers, limited["id"], "failed")
    assert failed["reason"]["code"] == "TimeLimitExceeded" and "1 s" in failed["reason"]["message"]
    output = log(base, headers, limited["id"])  # SIGTERM at the limit (a slow start may get it before "up")
    assert "TERM" in output or "up" not in output, output
    for job in httpx.get(f"{base}/api/v1/jobs", params={"state": "running"}, headers=headers).json():
        httpx.post(f"{base}/api/v1/jobs/{job['id']}/cancel", headers=headers)
    wait(base, headers, low["id"], "cancelled")


def test_logs_follow_in_the_api_and_the_cli(served):
    base, headers, _ = served
    code = "import time\nfor i in range(5):\n    print('line', i, flush=True); time.sleep(0.2)"
    job = submit(base, headers, code, gpus=0)
    with httpx.stream("GET", f"{base}/api/v1/jobs/{job['id']}/logs", params={"follow": "true"}, headers=headers,
                      timeout=30) as r:
        followed = b"".join(r.iter_bytes()).decode()
    assert [l for l in followed.splitlines() if l.startswith("line")] == [f"line {i}" for i in range(5)]
    assert wait(base, headers, job["id"], "succeeded")
    token = headers["Authorization"].split()[1]
    out = CliRunner().invoke(cli_app, ["logs", str(job["id"]), "--tail", "2", "--server", base, "--token", token])
    assert out.exit_code == 0 and out.output.splitlines() == ["line 3", "line 4"]
    job2 = submit(base, headers, code, gpus=0)
    out = CliRunner().invoke(cli_app, ["logs", str(job2["id"]), "-f", "--server", base, "--token", token])
    assert out.exit_code == 0 and "line 4" in out.output
    out = CliRunner().invoke(cli_app, ["submit", "--gpus", "1", "--cpu", "1", "--memory", "1GiB", "--env", "A=b=c",
                                       "--time-limit", "1h", "--server", base, "--token", token, "--",
                                       PY, "-c", "import os, sys; print(os.environ['A'], sys.argv[1:])", "--lr", "3e-4"])
    assert out.exit_code == 0 and "running on box" in out.output, out.output
    submitted = int(out.output.split()[1])
    cli_job = wait(base, headers, submitted, "succeeded")
    assert cli_job["time_limit_s"] == 3600 and cli_job["name"].startswith(Path(PY).name + " -c ")
    assert "b=c ['--lr', '3e-4']" in log(base, headers, submitted)
    out = CliRunner().invoke(cli_app, ["usage", "--server", base, "--token", token])
    assert out.exit_code == 0 and "default" in out.output and "GPU-hours" in out.output


@pytest.mark.parametrize("extra, message", [
    ({"duration": "1h"}, "give time_limit, not duration"),
    ({"pods": 2}, "runs as one process"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "set by the service"),
    ({"env": {"1BAD": "x"}}, "pattern"),
    ({"workdir": "relative"}, "absolute path"),
    ({"command": [""]}, "program"),
    ({"time_limit": "soon"}, "not a duration"),
])
def test_bad_commands_are_refused(tmp_path, extra, message):
    from fastapi.testclient import TestClient

    application, token = make_app(tmp_path)
    with TestClient(application) as client:
        body = job_body(**{"command": ["true"], **extra})
        r = client.post("/api/v1/jobs", json=body, headers=bearer(token))
    assert r.status_code == 422 and message in r.text, r.text


def test_recovery_kills_a_run_whose_job_no_longer_holds_its_devices(tmp_path):
    """The service died after storing a job as ended (or requeued) but before killing its process: at the next
    start that process is killed, not left on devices the store thinks free."""
    import subprocess

    from quasched.service.executor.commands import Executor

    executor = Executor("box", tmp_path, report=lambda change: None, jobs_dir=tmp_path / "own")
    orphan = subprocess.Popen(["sleep", "30"], start_new_session=True)
    (tmp_path / "jobs" / "9.run.json").write_text(json.dumps({"run": 0, "pid": orphan.pid,
                                                              "ticks": start_ticks(orphan.pid)}))
    executor.recover([])  # job 9 is not among the unfinished jobs
    assert orphan.wait(timeout=10) == -signal.SIGKILL


def test_what_a_command_leaves_behind_ends_with_it(served):
    """A command that starts a background process and exits: the job succeeds, and the leftover is killed."""
    base, headers, state = served
    code = ("import subprocess, sys; p = subprocess.Popen(['sleep', '30']); print('child', p.pid, flush=True)")
    job = submit(base, headers, code, gpus=1)
    assert wait(base, headers, job["id"], "succeeded")["exit_code"] == 0
    child = int(log(base, headers, job["id"]).split("child ")[1].split()[0])
    deadline = time.monotonic() + 5
    while start_ticks(child) is not None:
        assert time.monotonic() < deadline, "the command's leftover process still runs"
        time.sleep(0.05)


def test_a_kill_asked_just_before_the_service_stops_is_done(tmp_path, monkeypatch, accounts, jobs_dir):
    """The executor applies every change queued before it stops: a job that ended just before a shutdown
    leaves no process behind."""
    from dataclasses import replace

    from quasched.service.domain import Job, JobSpec, JobState
    from quasched.service.executor.commands import Executor

    monkeypatch.setitem(sys.modules, "pynvml", None)
    executor = Executor("box", tmp_path, report=lambda change: None, run_as=accounts, jobs_dir=jobs_dir)
    executor.start()
    job = Job(7, JobSpec("j", "t", 1000, 1024, command=("sleep", "30")), 0, 0.0, 7, JobState.RUNNING,
              placement=[("box", ())])
    executor.sync([job])
    record = tmp_path / "jobs" / "7.run.json"
    deadline = time.monotonic() + 30
    while not record.exists() or json.loads(record.read_text())["pid"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    pid = json.loads(record.read_text())["pid"]
    executor.sync([replace(job, state=JobState.CANCELLED, placement=[])])
    executor.stop()
    deadline = time.monotonic() + 10  # SIGKILL was sent before stop returned; the kernel ends it
    while start_ticks(pid) is not None:
        assert time.monotonic() < deadline, "the ended job's process survived the shutdown"
        time.sleep(0.02)
