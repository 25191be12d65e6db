"""A team's token used against the isolation of the other teams' jobs and of the service: a workdir swapped to
the state directory after the service checked it, the service's files read or written through what a job can
reach, a job's variables left behind by a wrapper that died, and a queue flooded with jobs. Real processes as
throw-away users (``qstest...``, as root: skipped otherwise), besides the flood."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from accounts import ROOT, job_python, os_users
from api_support import bearer, job_body, live_server, make_app
from serve_process import wait_for
from test_service_runas import box_server, two_teams  # noqa: F401  (a fixture)
from test_service_runs import log, wait

from quasched.service.executor import cgroups, commands as executor, joblog
from quasched.service.executor.runas import Account, write_private
from quasched.service.loop import controller
from quasched.service.runtime import broker

as_root = pytest.mark.skipif(not ROOT, reason="switching users needs root (useradd, setuid)")


@pytest.mark.slow
@as_root
def test_a_workdir_swapped_after_the_check_is_entered_as_its_user_never_as_root(two_teams, monkeypatch):
    """The job names a symbolic link to a directory its user may enter, and points it, once the service has
    checked it (the race won), at a directory of another team's user inside that user's private home (0700): the
    job never gets in, so it reads nothing there through relative paths or ``/proc/self/cwd``."""
    server_dir, jobs_dir, users = two_teams
    home = server_dir.parent / "nlp-home"
    (home / "code").mkdir(parents=True)
    (home / "code" / "secret.txt").write_text("hunter2\n")
    owner = pwd.getpwnam(users["nlp"])
    for path, mode in ((home, 0o700), (home / "code", 0o755), (home / "code" / "secret.txt", 0o644)):
        os.chown(path, owner.pw_uid, owner.pw_gid)
        path.chmod(mode)
    link = server_dir.parent / "workdir"
    link.symlink_to("/tmp")
    checked = executor.unreachable

    def check_then_swap(path: Path, account: Account) -> str | None:
        problem = checked(path, account)
        if path == link:
            link.unlink()
            link.symlink_to(home / "code")
        return problem

    monkeypatch.setattr(executor, "unreachable", check_then_swap)
    application, token = box_server(server_dir, jobs_dir, [f"{team}={user}" for team, user in users.items()])
    admin = bearer(token)
    with live_server(application) as base:
        assert httpx.put(f"{base}/api/v1/queues/vision", json={}, headers=admin).status_code == 200
        body = job_body(team="vision", cpu=1, memory="1GiB", gpus=1, workdir=str(link), command=[
            "/bin/sh", "-c", "cat secret.txt /proc/self/cwd/secret.txt"])
        mine = httpx.post(f"{base}/api/v1/jobs", json=body, headers=admin, timeout=30).json()
        ended = wait(base, admin, mine["id"], "succeeded", "failed")
        text = log(base, admin, mine["id"])
    assert "hunter2" not in text, text
    assert ended["state"] == "failed" and ended["exit_code"] == 127, text
    assert f"Permission denied: '{link}'" in text


@pytest.mark.slow
@as_root
def test_the_services_files_are_its_own_and_a_dead_wrappers_variables_are_removed(two_teams):
    """Every file the service and its wrappers write for a job (log, run record, exit status) is mode 0600, and
    an environment file a wrapper never read (it died first) is removed when the service starts."""
    server_dir, jobs_dir, users = two_teams
    state_jobs = server_dir / "state" / "jobs"
    state_jobs.mkdir(parents=True)
    left = state_jobs / "4000.0.env"
    write_private(left, json.dumps({"SECRET": "hunter2"}).encode())
    application, token = box_server(server_dir, jobs_dir, [f"*={users['vision']}"])
    admin = bearer(token)
    with live_server(application) as base:
        job = httpx.post(f"{base}/api/v1/jobs", json=job_body(cpu=1, memory="1GiB", gpus=1, command=[
            job_python(), "-c", "print('x' * 300)"]), headers=admin, timeout=30).json()
        assert wait(base, admin, job["id"], "succeeded", "failed")["state"] == "succeeded"
    assert not left.exists()
    files = {path.name: stat.S_IMODE(path.stat().st_mode) for path in state_jobs.iterdir()}
    assert {f"{job['id']}.log", f"{job['id']}.run.json", f"{job['id']}.0.exit"} <= set(files), files
    assert set(files.values()) == {0o600}, files


@as_root
def test_the_service_never_writes_a_file_of_its_own_through_a_symbolic_link(tmp_path):
    target = tmp_path / "shadow"
    target.write_text("root:x:0:\n")
    planted = tmp_path / "1.log"
    planted.symlink_to(target)
    with pytest.raises(OSError):
        joblog.append(planted, joblog.Caps(), b"owned\n")
    assert target.read_text() == "root:x:0:\n"


def test_a_team_past_its_unfinished_jobs_gets_429_naming_the_limit(tmp_path, monkeypatch):
    """Pending and running jobs count against their team's limit; another team's do not, finished ones neither."""
    from fastapi.testclient import TestClient

    monkeypatch.setattr(controller, "MAX_UNFINISHED_PER_TEAM", 2)
    application, token = make_app(tmp_path)
    admin = bearer(token)
    with TestClient(application) as client:
        assert client.put("/api/v1/queues/nlp", json={}, headers=admin).status_code == 200
        codes = [client.post("/api/v1/jobs", json=job_body(), headers=admin).status_code for _ in range(3)]
        refused = client.post("/api/v1/jobs", json=job_body(), headers=admin)
        other = client.post("/api/v1/jobs", json=job_body(team="nlp"), headers=admin)
        first = client.get("/api/v1/jobs?team=default", headers=admin).json()[-1]
        assert client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=admin).status_code == 200
        again = client.post("/api/v1/jobs", json=job_body(), headers=admin)
    assert codes == [201, 201, 429]
    detail = refused.json()["detail"][0]
    assert refused.status_code == 429 and detail["loc"] == ["body", "team"]
    assert detail["msg"].startswith("team default has 2 unfinished jobs, the most a team may have (2)")
    assert other.status_code == 201, other.text
    assert again.status_code == 201, again.text


@pytest.mark.slow
def test_a_token_holds_at_most_its_streams_open_and_a_closed_one_frees_its_place(tmp_path, monkeypatch):
    """Live streams and followed logs held open by one token are capped (each costs the server a poll); one more
    is 429 naming the cap, another token is not held back, and closing one lets the token open another."""
    monkeypatch.setattr(broker, "MAX_STREAMS_PER_TOKEN", 2)
    application, token = make_app(tmp_path)
    admin = bearer(token)
    with live_server(application) as base, httpx.Client(base_url=base, timeout=30) as client, ExitStack() as held:
        team = bearer(client.post("/api/v1/tokens", json={"name": "ci", "team": "default"},
                                  headers=admin).json()["token"])
        opened = [held.enter_context(client.stream("GET", "/api/v1/stream", headers=team)) for _ in range(2)]
        with client.stream("GET", "/api/v1/stream", headers=team) as refused:
            said = json.loads(refused.read())["detail"] if refused.status_code == 429 else ""
        with client.stream("GET", "/api/v1/stream", headers=admin) as other:
            assert other.status_code == 200
        opened[0].close()
        wait_for(lambda: _reopens(client, team), 30, "a closed stream frees its place")
    assert [r.status_code for r in opened] == [200, 200]
    assert refused.status_code == 429
    assert "holds 2 open streams (live events and followed logs), the most one may (2)" in said


def _reopens(client: httpx.Client, headers: dict[str, str]) -> bool:
    with client.stream("GET", "/api/v1/stream", headers=headers) as response:
        return response.status_code == 200


#: as the job: write its pid to each file of argv[1] (a JSON list: the cgroup.procs of its cgroup, its parent and
#: its hierarchy's root, its limits), signal its wrapper (root: its parent, signal 0) and read its environment;
#: prints what was allowed
ESCAPE = """import json, os, sys
allowed = []
for path in json.loads(sys.argv[1]):
    try:
        with open(path, "r+") as f:
            f.write(str(os.getpid()))
        allowed.append(path)
    except OSError:
        pass
for name, attempt in (("kill", lambda: os.kill(os.getppid(), 0)),
                      ("environ", lambda: open(f"/proc/{os.getppid()}/environ").read())):
    try:
        attempt()
        allowed.append(name)
    except OSError:
        pass
print("allowed:", allowed)
"""


@pytest.mark.slow
@as_root
def test_a_job_cannot_leave_its_cgroup_raise_its_limits_or_reach_its_root_wrapper(tmp_path):
    found = cgroups.detect()
    if isinstance(found, str):
        pytest.skip(found)
    name = f"quasched/test-escape-{os.getpid()}"
    targets = [str(d / f) for d in found.dirs(name).values() for f in ("cgroup.procs", "memory.max",
                                                                        "memory.limit_in_bytes", "cpu.cfs_quota_us")]
    targets += [str(d.parent / "cgroup.procs") for d in found.dirs(name).values()]
    targets += [str(base / "cgroup.procs") for base in found.bases.values()]
    with os_users("e") as (user_name,):
        user = pwd.getpwnam(user_name)
        exit_file = tmp_path / "exit"
        done = subprocess.run([sys.executable, "-I", "-m", "quasched.service.executor.wrapper", "--uid", str(user.pw_uid),
                               "--gid", str(user.pw_gid), "--groups", str(user.pw_gid), "--cgroup", name,
                               "--memory-max", str(256 << 20), "--workdir", "/", str(exit_file), "--",
                               job_python(), "-c", ESCAPE, json.dumps(targets)],
                              capture_output=True, text=True, timeout=60, env={}, cwd=str(tmp_path))
    assert "allowed: []" in done.stdout, done.stdout + done.stderr
    assert json.loads(exit_file.read_text())["status"] == 0
