"""``kill -9`` of ``quasched serve`` while its jobs run: the processes survive in their own sessions;
the restarted service re-attaches to the one still running, records the exit status of the one that
ended meanwhile, and marks lost the one that died without a status (whose pid now names another
process); the GPUs of the dead ones are free again, and nothing is left running. The commands run as a
throw-away user (as root), so what they wait for is in a directory that user reaches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from accounts import command_accounts, job_python, serve_options, shared_dir
from test_service_runs import wait

from quasched.service.executor.commands import start_ticks

pytestmark = pytest.mark.slow  # kill -9 of a real quasched serve

PY = sys.executable
JOB_PY = job_python()
WAIT_FOR = "import os, sys, time\nwhile not os.path.exists({path!r}): time.sleep(0.05)\nsys.exit({code})"


def start_server(tmp: Path, port: int, options: list[str]) -> subprocess.Popen[str]:
    cmd = [PY, "-m", "quasched.cli", "serve", "--port", str(port), "--cluster", "cluster.yaml", "--grace", "1",
           *options]
    proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)


def test_restart_after_kill_9_reattaches_records_and_marks_lost(tmp_path):
    (tmp_path / "cluster.yaml").write_text(
        "pools:\n  - {name: box, count: 1, cpu: 8, memory: 32Gi, gpu: {model: T4, count: 4}}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    shared = shared_dir()
    try:
        with command_accounts() as accounts:
            reattach(tmp_path, shared, base, serve_options(accounts, shared / "jobs"))
    finally:
        shutil.rmtree(shared)


def reattach(tmp_path: Path, shared: Path, base: str, options: list[str]) -> None:
    port = int(base.rsplit(":", 1)[1])
    server = start_server(tmp_path, port, options)
    pids: list[int] = []
    try:
        headers = {"Authorization": f"Bearer {(tmp_path / 'quasched.token').read_text().strip()}"}
        ids = {}
        for name, path, code in (("survivor", "release", 0), ("ends", "b-go", 7), ("dies", "never", 0)):
            body = {"name": name, "team": "default", "cpu": 1, "memory": "1GiB", "gpus": 1,
                    "command": [JOB_PY, "-c", WAIT_FOR.format(path=str(shared / path), code=code)]}
            job = httpx.post(f"{base}/api/v1/jobs", json=body, headers=headers).json()
            assert job["state"] == "running" and job["placement"][0]["node"] == "box-0"  # the only node: this machine
            ids[name] = job["id"]
        records = tmp_path / "quasched-state" / "jobs"
        runs = {}
        for name, job_id in ids.items():
            deadline = time.monotonic() + 20
            while not (records / f"{job_id}.run.json").exists() or \
                    json.loads((records / f"{job_id}.run.json").read_text())["pid"] is None:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            runs[name] = json.loads((records / f"{job_id}.run.json").read_text())
            pids.append(runs[name]["pid"])
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        # while the service is down: one job ends with code 7, one dies without a status (its pid reused)
        (shared / "b-go").touch()
        os.killpg(runs["dies"]["pid"], signal.SIGKILL)
        me = os.getpid()
        (records / f"{ids['dies']}.run.json").write_text(json.dumps({**runs["dies"], "pid": me,
                                                                     "ticks": (start_ticks(me) or 0) + 1}))
        deadline = time.monotonic() + 20
        while start_ticks(runs["ends"]["pid"]) is not None:
            assert time.monotonic() < deadline, "job 'ends' did not end"
            time.sleep(0.05)
        assert start_ticks(runs["survivor"]["pid"]) == runs["survivor"]["ticks"]  # survived in its own session

        server = start_server(tmp_path, port, options)
        ended = wait(base, headers, ids["ends"], "failed")
        assert ended["exit_code"] == 7 and ended["reason"]["code"] == "NonZeroExit"
        lost = wait(base, headers, ids["dies"], "failed")
        assert lost["reason"]["code"] == "Lost" and lost["exit_code"] is None
        survivor = httpx.get(f"{base}/api/v1/jobs/{ids['survivor']}", headers=headers).json()
        assert survivor["state"] == "running" and survivor["restarts"] == 0
        node = httpx.get(f"{base}/api/v1/nodes", headers=headers).json()[0]
        assert sum(node["gpu_used_milli"]) == 1000 and node["jobs"] == [ids["survivor"]]
        (shared / "release").touch()
        done = wait(base, headers, ids["survivor"], "succeeded")
        assert done["exit_code"] == 0
    finally:
        server.kill()
        server.wait(timeout=10)
        left = [pid for pid in pids if start_ticks(pid) is not None]
        for pid in left:
            os.killpg(pid, signal.SIGKILL)
    assert not left, f"processes left running: {left}"


class Died(BaseException):
    """The service's SIGKILL at one point of starting a run."""


class Ends:
    """What an executor reports of its runs' ends: ``{job_id: exit code, or "lost"}``."""

    def __init__(self) -> None:
        self.ends: dict[int, int | str] = {}

    def exited(self, job_id: int, now: float, code: int, tail: str, **_: object) -> None:
        self.ends[job_id] = code

    def lost(self, job_id: int, now: float, why: str) -> None:
        self.ends[job_id] = "lost"

    def report(self, change) -> None:
        change(self, time.time())


def died_starting(tmp_path: Path, monkeypatch, where: str) -> int | str:
    """Kill the service (``Died``) ``where`` in starting a job's run, restart it on the same state, release the
    command: how the restarted service reports the run's end."""
    from quasched.service.domain import Job, JobSpec, JobState
    from quasched.service.executor import commands as module

    shared = shared_dir()
    release = shared / "release"
    job = Job(7, JobSpec("j", "t", 1000, 1024, command=(JOB_PY, "-c", WAIT_FOR.format(path=str(release), code=3))),
              0, 0.0, 7, JobState.RUNNING, placement=[("box", ())])
    try:
        with command_accounts() as accounts:
            def new_executor(ends: Ends) -> module.Executor:
                return module.Executor("box", tmp_path, report=ends.report, run_as=accounts, jobs_dir=shared / "jobs")

            def die(*_: object, **__: object) -> None:
                raise Died

            if where == "before the wrapper starts":
                monkeypatch.setattr(module.subprocess, "Popen", die)
            else:  # after it started, before its pid is recorded
                write = module._write_json
                monkeypatch.setattr(module, "_write_json",
                                    lambda path, value: die() if value.get("pid") else write(path, value))
            with pytest.raises(Died):
                new_executor(Ends())._launch(job)
            monkeypatch.undo()
            ends = Ends()
            restarted = new_executor(ends)
            restarted.recover([job])
            restarted.start()
            try:
                release.touch()
                deadline = time.monotonic() + 30
                while 7 not in ends.ends:
                    assert time.monotonic() < deadline, "the run's end was never reported"
                    time.sleep(0.05)
            finally:
                restarted.stop()
            return ends.ends[7]
    finally:
        shutil.rmtree(shared)


def test_a_run_whose_pid_the_service_died_before_recording_is_reattached(tmp_path, monkeypatch):
    """The service dies between starting a run's wrapper and recording its pid: the restarted service finds the
    wrapper and reports the command's own exit code, not a lost job."""
    assert died_starting(tmp_path, monkeypatch, "after the wrapper started") == 3


def test_a_run_the_service_died_before_starting_is_started(tmp_path, monkeypatch):
    """The service dies after recording a run but before starting its wrapper: the restarted service starts the
    command (it never ran), which ends with its own exit code."""
    assert died_starting(tmp_path, monkeypatch, "before the wrapper starts") == 3
