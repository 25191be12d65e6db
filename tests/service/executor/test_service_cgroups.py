"""What a job can take: the cgroup arithmetic (paths, limits, layouts v1 and v2 on fake trees), then real jobs
in real cgroups (as root with a writable hierarchy): what a command starts with ``setsid`` or a double fork
ends with its job at a cancel and at its time limit, a job over its memory request fails ``OutOfMemory``,
and a job is billed for its own run (the wrapper's clock), not up to a restart of the service."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from accounts import command_accounts, shared_dir
from api_support import bearer, job_body, live_server, make_app
from test_service_runs import HTTP_S, PY, assert_no_process_left, box_cluster, log, submit, wait, wait_log

from quasched.policies.registry import parse_spec
from quasched.service.executor import cgroups
from quasched.service.executor.cgroups import Hierarchy
from quasched.service.executor.commands import Executor
from quasched.service.loop.state import LoopOptions

ROOT = os.geteuid() == 0
FOUND = cgroups.detect()
real = pytest.mark.skipif(not isinstance(FOUND, Hierarchy), reason=f"no cgroups to use: {FOUND}")

#: ignores SIGTERM (as what it starts does), starts ``setsid sleep``, a double-forked sleeper in a new session,
#: and in another session one that says when it gets SIGTERM
ESCAPERS = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
escaped = subprocess.Popen(['setsid', 'sleep', '1001'])
subprocess.Popen(['setsid', sys.executable, '-c', 'import os, signal, time\\n'
                  'signal.signal(signal.SIGTERM, lambda *a: print("escaped TERM", flush=True))\\n'
                  'print("told", os.getpid(), flush=True)\\n'
                  'time.sleep(1001)'])
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        print('double', os.getpid(), flush=True)
        time.sleep(1001)
    os._exit(0)
print('setsid', escaped.pid, flush=True)
time.sleep(1001)
"""


def test_limits_of_a_job_v1_and_v2():
    assert cgroups.limits(2, 1 << 30, 1500) == [("memory.max", "1073741824"), ("memory.swap.max", "0"),
                                                ("cpu.max", "150000 100000")]
    assert cgroups.limits(1, 256 << 20, 5) == [  # 5 milli-CPUs: 500 µs a period, raised to the kernel's least
        ("memory.limit_in_bytes", "268435456"), ("memory.memsw.limit_in_bytes", "268435456"),
        ("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "1000")]
    assert cgroups.limits(1, None, 250) == [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "25000")]
    assert cgroups.limits(2, None, None) == []
    assert cgroups.job_cgroup("0123abcd", 7, 2) == "quasched/0123abcd-job-7-2"
    tag = cgroups.tag_of(Path("/srv/quasched-state"))
    assert len(tag) == 8 and tag == cgroups.tag_of(Path("/srv/quasched-state/")) != cgroups.tag_of(Path("/srv/x"))


@pytest.mark.skipif(not ROOT, reason="detect() needs root")
def test_detect_v2_and_v1_below_the_service_cgroup(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "system.slice" / "quasched.service").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    own = tmp_path / "own"
    own.write_text("0::/system.slice/quasched.service\n")
    assert cgroups.detect(v2, own) == Hierarchy(2, {"unified": v2 / "system.slice" / "quasched.service"})
    v1 = tmp_path / "v1"
    for ctrl in ("memory", "cpu", "freezer", "pids"):
        (v1 / ctrl).mkdir(parents=True)
        (v1 / ctrl / "cgroup.procs").write_text("")
    (v1 / "memory" / "box").mkdir()
    own.write_text("4:memory:/box\n3:cpu,cpuacct:/gone\n2:freezer:/\n1:pids:/\n")
    # memory: the service's own cgroup; cpu: its cgroup is not in this mount (a namespace): the mount's root
    assert cgroups.detect(v1, own) == Hierarchy(1, {"memory": v1 / "memory" / "box", "cpu": v1 / "cpu",
                                                    "freezer": v1 / "freezer"})
    assert isinstance(cgroups.detect(tmp_path / "none", own), str)


@pytest.mark.skipif(not ROOT, reason="detect() needs root")
def test_create_writes_the_limits_a_hierarchy_has_and_leftovers_are_found(tmp_path):
    h = Hierarchy(1, {"memory": tmp_path / "memory", "cpu": tmp_path / "cpu"})
    name = cgroups.job_cgroup("abcd1234", 3, 1)
    for ctrl, files in (("memory", ("memory.limit_in_bytes",)), ("cpu", ("cpu.cfs_period_us", "cpu.cfs_quota_us"))):
        (tmp_path / ctrl / name).mkdir(parents=True)  # what the kernel makes with a cgroup (no memsw: no swap)
        for file in files:
            (tmp_path / ctrl / name / file).write_text("")
    assert cgroups.create(h, name, 512 << 20, 2000) == []
    assert (tmp_path / "memory" / name / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (tmp_path / "cpu" / name / "cpu.cfs_quota_us").read_text() == "200000"
    assert cgroups.create(Hierarchy(1, {"cpu": tmp_path / "cpu"}), name, 1 << 20, None) == \
        ["memory.limit_in_bytes: not available"]  # no memory hierarchy
    (tmp_path / "cpu" / "quasched" / "ffff0000-job-4-0").mkdir()
    (tmp_path / "cpu" / "quasched" / "abcd1234-notes").mkdir()
    assert cgroups.leftovers(h, "abcd1234") == [(3, 1, name)]


def test_a_kill_copes_with_the_cgroup_removed_under_it(tmp_path, monkeypatch):
    """The wrapper and the executor may end a job at once: the one that finds the cgroup removed by the other
    (between freezing it and reading its state) has nothing left to do, and says so without an error."""
    name = cgroups.job_cgroup("abcd1234", 5, 0)
    freezer = tmp_path / "freezer" / name
    freezer.mkdir(parents=True)
    victim = subprocess.Popen(["sleep", "1001"])
    (freezer / "cgroup.procs").write_text(f"{victim.pid}\n")
    write = cgroups._write

    def removed_by_the_other(path: Path, value: str) -> bool:
        done = write(path, value)
        if value == "FROZEN":
            shutil.rmtree(freezer)  # emptied and removed meanwhile
        return done

    monkeypatch.setattr(cgroups, "_write", removed_by_the_other)
    try:
        assert cgroups.kill(Hierarchy(1, {"freezer": tmp_path / "freezer"}), name) is True
    finally:
        victim.kill()
    assert victim.wait(timeout=10) == -signal.SIGKILL


def test_without_cgroups_the_executor_says_so_and_uses_process_groups(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cgroups, "detect", lambda: "the service does not run as root")
    executor = Executor("box", tmp_path / "state", report=lambda change: None, jobs_dir=tmp_path / "jobs")
    assert executor.cgroups is None
    assert "jobs run in process groups, not cgroups" in capsys.readouterr().err


@pytest.fixture
def contained(tmp_path, monkeypatch) -> Iterator[tuple[str, dict[str, str], Path, Path]]:
    """(base URL, admin headers, jobs' state dir, shared dir) of a live server running commands on ``box``."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    shared = shared_dir()
    with command_accounts("cg") as accounts:
        options = LoopOptions(local_node="box", grace_s=2.0, policy=parse_spec("bestfit"))
        application, token = make_app(tmp_path, clock=time.time, cluster=box_cluster(), state_dir=tmp_path / "state",
                                      options=options, run_as=accounts, jobs_dir=shared / "jobs")
        with live_server(application) as base:
            yield base, bearer(token), tmp_path / "state" / "jobs", shared
        assert_no_process_left(tmp_path / "state")
    shutil.rmtree(shared)


def escapers(base: str, headers: dict[str, str], job_id: int) -> list[int]:
    wait_log(base, headers, job_id, "told")
    wait_log(base, headers, job_id, "setsid")
    wait_log(base, headers, job_id, "double")
    text = log(base, headers, job_id)
    return [int(text.split(f"{word} ")[1].split()[0]) for word in ("setsid", "double", "told")]


def wait_gone(pids: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while any(cgroups.alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if cgroups.alive(p)]}"
        time.sleep(0.05)


@real
@pytest.mark.slow  # a real server
def test_what_leaves_the_group_ends_with_the_job_at_cancel_and_time_limit(contained):
    base, headers, jobs, _ = contained
    cancelled = submit(base, headers, ESCAPERS, gpus=1)
    limited = submit(base, headers, ESCAPERS, gpus=1, time_limit="3s")
    pids: list[int] = []
    try:
        pids += escapers(base, headers, cancelled["id"])
        pids += escapers(base, headers, limited["id"])
        assert httpx.post(f"{base}/api/v1/jobs/{cancelled['id']}/cancel", headers=headers,
                          timeout=HTTP_S).json()["state"] == "stopping"
        wait_log(base, headers, cancelled["id"], "escaped TERM")  # the grace period's SIGTERM reached it
        assert wait(base, headers, cancelled["id"], "cancelled")["exit_code"] is None  # it ignored SIGTERM: SIGKILL
        wait_gone(pids[:3])
        failed = wait(base, headers, limited["id"], "failed")
        assert failed["reason"]["code"] == "TimeLimitExceeded"
        wait_gone(pids[3:])
    finally:
        for pid in pids:
            if cgroups.alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert not cgroups.leftovers(FOUND, cgroups.tag_of(jobs.parent))  # type: ignore[arg-type]


@real
def test_recovery_empties_the_cgroup_of_a_job_that_no_longer_holds_its_resources(tmp_path):
    """The service died before it could end a job's processes: at the next start its cgroup is emptied, removed."""
    executor = Executor("box", tmp_path / "state", report=lambda change: None, jobs_dir=tmp_path / "jobs")
    assert isinstance(FOUND, Hierarchy)
    name = cgroups.job_cgroup(cgroups.tag_of(tmp_path / "state"), 9, 0)
    cgroups.create(FOUND, name, None, None)
    orphan = subprocess.Popen(["sleep", "1001"], start_new_session=True)
    try:
        cgroups.join(FOUND, name, orphan.pid)
        assert cgroups.procs(FOUND, name) == {orphan.pid}
        executor.recover([])  # job 9 is not among the unfinished jobs
        assert orphan.wait(timeout=30) == -signal.SIGKILL
    finally:
        orphan.kill()
        cgroups.clear(FOUND, name)
    assert not any(path.exists() for path in FOUND.dirs(name).values())


@real
@pytest.mark.slow  # a real server
def test_a_job_over_its_memory_request_fails_out_of_memory(contained):
    base, headers, _, _ = contained
    grow = "x = []\nfor _ in range({n}): x.append(b'x' * (16 << 20))\nprint('survived', {n} * 16, 'MiB')"

    def run(chunks: int) -> dict:
        body = job_body(name="grow", cpu=1, memory="256MiB", gpus=0, command=[PY, "-c", grow.format(n=chunks)])
        job = httpx.post(f"{base}/api/v1/jobs", json=body, headers=headers, timeout=HTTP_S).json()
        return wait(base, headers, job["id"], "failed", "succeeded")

    failed = run(64)  # 1 GiB
    assert failed["state"] == "failed" and failed["exit_code"] == -signal.SIGKILL, failed
    assert failed["reason"]["code"] == "OutOfMemory" and "256 MiB" in failed["reason"]["message"]
    assert failed["reason"]["evidence"]["memory_mib"] == 256
    fits = run(4)  # 64 MiB
    assert fits["state"] == "succeeded" and "survived 64 MiB" in log(base, headers, fits["id"])


@real
@pytest.mark.slow  # a real server
def test_a_job_is_billed_for_its_own_run_across_a_restart(tmp_path, monkeypatch):
    """The service stops while a job runs; the job ends; the service starts again: the job's times and usage are
    the wrapper's start and end of the command, not the restart."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    shared = shared_dir()
    release = shared / "release"
    code = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
    try:
        with command_accounts("bill") as accounts:
            def server():  # the same database and state directory each time
                options = LoopOptions(local_node="box", grace_s=2.0, policy=parse_spec("bestfit"))
                return make_app(tmp_path, clock=time.time, cluster=box_cluster(), state_dir=tmp_path / "state",
                                options=options, run_as=accounts, jobs_dir=shared / "jobs")

            application, token = server()
            headers = bearer(token)
            with live_server(application) as base:
                job = submit(base, headers, code, gpus=2)
                wait_log(base, headers, job["id"], "run 1 of job")
            exit_file = tmp_path / "state" / "jobs" / f"{job['id']}.0.exit"
            release.touch()
            release.chmod(0o644)
            deadline = time.monotonic() + 30
            while not exit_file.exists():  # it ended while no service ran
                assert time.monotonic() < deadline
                time.sleep(0.05)
            ran = json.loads(exit_file.read_text())
            restarted_at = time.time()
            application, _ = server()
            with live_server(application) as base:
                done = wait(base, headers, job["id"], "succeeded")
                usage = httpx.get(f"{base}/api/v1/usage", headers=headers, timeout=HTTP_S).json()
        assert (done["started_at"], done["finished_at"]) == (ran["started"], ran["ended"])
        assert done["finished_at"] < restarted_at
        assert done["wall_s"] == pytest.approx(ran["ended"] - ran["started"])
        assert done["gpu_hours"] == pytest.approx(done["wall_s"] * 2 / 3600)
        assert [u["wall_s"] for u in usage if u["team"] == "default"] == [pytest.approx(done["wall_s"])]
    finally:
        shutil.rmtree(shared)
