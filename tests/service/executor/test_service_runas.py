"""Who runs what: a team's command runs as the OS user the operator mapped the team to, never as root, and reads
nothing of the service (its token, database, state directory, other teams' logs and run records, environment);
a command the server would never run is refused at submit; a command job is placed only on the node that runs
commands. Real processes as throw-away users (``qstest...``, created as root: skipped otherwise)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
import time
from pathlib import Path

import httpx
import pytest
from accounts import ROOT, job_python, os_users, shared_dir
from api_support import bearer, job_body, live_server, make_app
from test_service_runs import box_cluster, log, wait
from typer.testing import CliRunner

from quasched.cli import app as cli_app
from quasched.policies.registry import parse_spec
from quasched.service.domain import JobSpec, QueueSpec
from quasched.service.executor.runas import DEFAULT_PATH, Account, RunAs, run_as
from quasched.service.loop.controller import Controller
from quasched.service.loop.state import LoopOptions
from quasched.service.runtime.service import default_cluster

pytestmark = pytest.mark.slow  # real processes as throw-away users

as_root = pytest.mark.skipif(not ROOT, reason="switching users needs root (useradd, setuid)")
#: tries to read each path of argv[1] (a JSON object), then prints who it is, where, with what environment
PROBE = """import json, os, sys
seen = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        seen[name] = "read"
    except OSError as err:
        seen[name] = type(err).__name__
open("made-by-the-job", "w").close()
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()), "cwd": os.getcwd(),
                  "env": dict(os.environ), "seen": seen}))"""


@pytest.fixture
def two_teams(monkeypatch):
    """(server directory, jobs directory, {team: user}) with teams vision and nlp mapped to two new users; the
    service's environment holds secrets."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://quasched:hunter2@db/quasched")
    monkeypatch.setenv("QUASCHED_TOKEN", "hunter2-token")
    shared = shared_dir()
    server_dir = shared / "server"
    server_dir.mkdir(mode=0o755)  # as a service's working directory often is: anyone may look in
    server_dir.chmod(0o755)
    with os_users("v", "n") as (vision, nlp):
        yield server_dir, shared / "jobs", {"vision": vision, "nlp": nlp}
    shutil.rmtree(shared)


@pytest.fixture
def jobs_dir():
    path = shared_dir()
    yield path
    shutil.rmtree(path)


def box_server(server_dir: Path, jobs_dir: Path, mapping: list[str]) -> tuple[object, str]:
    """(app, admin token) of a server in ``server_dir`` running the commands of jobs on ``box`` as ``mapping``."""
    return make_app(server_dir, clock=time.time, cluster=box_cluster(), state_dir=server_dir / "state",
                    options=LoopOptions(local_node="box", grace_s=1.0, policy=parse_spec("bestfit")), run_as=run_as(mapping),
                    jobs_dir=jobs_dir)


def probe(base: str, headers: dict[str, str], team: str, paths: dict[str, str], **kw: object) -> dict:
    body = job_body(team=team, cpu=1, memory="1GiB", gpus=1, command=[job_python(), "-c", PROBE, json.dumps(paths)],
                    **kw)
    r = httpx.post(f"{base}/api/v1/jobs", json=body, headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


@as_root
def test_a_team_command_runs_as_its_user_and_reads_nothing_of_the_service(two_teams):
    server_dir, jobs_dir, users = two_teams
    state = server_dir / "state"
    application, token = box_server(server_dir, jobs_dir, [f"{team}={user}" for team, user in users.items()])
    admin = bearer(token)
    with live_server(application) as base:
        tokens = {}
        for team in users:
            assert httpx.put(f"{base}/api/v1/queues/{team}", json={}, headers=admin).status_code == 200
            tokens[team] = bearer(httpx.post(f"{base}/api/v1/tokens", json={"name": team, "team": team},
                                             headers=admin).json()["token"])
        other = probe(base, tokens["nlp"], "nlp", {})
        assert wait(base, admin, other["id"], "succeeded", "failed")["state"] == "succeeded"
        mine = probe(base, tokens["vision"], "vision", {
            "token file": str(server_dir / "quasched.token"), "database": str(server_dir / "quasched.db"),
            "state directory": str(state), "logs": str(state / "jobs"),
            "other team's log": str(state / "jobs" / f"{other['id']}.log"),
            "other team's run record": str(state / "jobs" / f"{other['id']}.run.json"),
            "other team's directory": str(jobs_dir / str(other["id"])), "jobs directory": str(jobs_dir)})
        assert wait(base, admin, mine["id"], "succeeded", "failed")["state"] == "succeeded", log(base, admin, mine["id"])
        seen = json.loads(log(base, tokens["vision"], mine["id"]).splitlines()[-1])
    user = pwd.getpwnam(users["vision"])
    assert seen["uid"] == user.pw_uid != 0 and seen["gid"] == user.pw_gid
    assert seen["groups"] == sorted(os.getgrouplist(user.pw_name, user.pw_gid))  # no group of root's
    assert set(seen["seen"].values()) == {"PermissionError"}, seen["seen"]
    env = seen["env"]
    assert "hunter2" not in json.dumps(env) and "DATABASE_URL" not in env
    assert (env["USER"], env["LOGNAME"], env["HOME"], env["PATH"]) == (user.pw_name, user.pw_name, user.pw_dir,
                                                                       DEFAULT_PATH)
    assert set(env) - {"PWD", "SHELL", "LANG", "LANGUAGE", "TZ"} - {k for k in env if k.startswith("LC_")} == {
        "PATH", "HOME", "USER", "LOGNAME", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
        "QUASCHED_JOB_ID", "QUASCHED_JOB_NAME"}
    workdir = Path(seen["cwd"])  # its own directory, outside the state directory, its user's alone
    assert workdir == (jobs_dir / str(mine["id"])).resolve() and state.resolve() not in workdir.parents
    info = workdir.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (user.pw_uid, 0o700)
    assert stat.S_IMODE((workdir / "made-by-the-job").stat().st_mode) == 0o600  # umask 077
    for path, mode in ((state, 0o700), (state / "jobs", 0o700), (server_dir / "quasched.db", 0o600),
                       (server_dir / "quasched.token", 0o600)):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


@as_root
def test_a_workdir_its_user_cannot_enter_fails_the_job_with_the_reason(two_teams):
    server_dir, jobs_dir, users = two_teams
    state = server_dir / "state"
    application, token = box_server(server_dir, jobs_dir, [f"*={users['vision']}"])
    admin = bearer(token)
    with live_server(application) as base:
        refused = probe(base, admin, "default", {}, workdir=str(state))
        given = probe(base, admin, "default", {}, workdir="/tmp")
        failed = wait(base, admin, refused["id"], "failed")
        assert failed["exit_code"] == 127
        assert (f"cannot start the command: workdir {state.resolve()}: {state.resolve()} is not searchable by user "
                f"{users['vision']}") in log(base, admin, refused["id"])
        assert wait(base, admin, given["id"], "succeeded")["exit_code"] == 0
        assert json.loads(log(base, admin, given["id"]).splitlines()[-1])["cwd"] == "/tmp"
    os.unlink("/tmp/made-by-the-job")


#: a module every Python started with its folder on PYTHONPATH imports: it leaves a file naming its uid
SITE = "import os\nopen(os.path.join(os.path.dirname(__file__), f'imported-by-{os.getuid()}-{os.getpid()}'), 'w').close()\n"


@as_root
def test_the_jobs_variables_reach_its_command_never_a_process_running_as_root(two_teams):
    """A job's environment (``PYTHONPATH`` here, ``LD_PRELOAD`` alike) reaches its command, run as its user, and
    not the wrapper that starts it as root."""
    server_dir, jobs_dir, users = two_teams
    hooks = server_dir.parent / "hooks"
    hooks.mkdir()
    hooks.chmod(0o777)
    (hooks / "sitecustomize.py").write_text(SITE)
    application, token = box_server(server_dir, jobs_dir, [f"*={users['vision']}"])
    with live_server(application) as base:
        job = probe(base, bearer(token), "default", {}, env={"PYTHONPATH": str(hooks)})
        assert wait(base, bearer(token), job["id"], "succeeded", "failed")["state"] == "succeeded"
    assert {int(p.name.split("-")[2]) for p in hooks.glob("imported-by-*")} == {pwd.getpwnam(users["vision"]).pw_uid}


def refused(application, token: str, body: dict) -> httpx.Response:
    from fastapi.testclient import TestClient

    with TestClient(application) as client:
        assert client.put("/api/v1/queues/nlp", json={}, headers=bearer(token)).status_code == 200
        return client.post("/api/v1/jobs", json=body, headers=bearer(token))


SOMEONE = Account("qstest-someone", 4242, 4242, (4242,), "/nonexistent", "/bin/sh")


@pytest.mark.parametrize("accounts, message", [
    (RunAs({"vision": SOMEONE}, service=SOMEONE, root=True),
     "team 'nlp' has no user to run commands as: the operator maps it to one with `quasched serve --run-as nlp=USER`"),
    (RunAs(service=SOMEONE, root=False),
     "this server runs as qstest-someone, not root, and cannot switch users: the operator starts it with "
     "--run-as-self"),
])
def test_a_command_of_a_team_without_a_user_is_refused(tmp_path, jobs_dir, accounts, message):
    application, token = make_app(tmp_path, cluster=box_cluster(), state_dir=tmp_path / "state",
                                  options=LoopOptions(local_node="box"), run_as=accounts, jobs_dir=jobs_dir)
    r = refused(application, token, job_body(team="nlp", cpu=1, memory="1GiB", command=["true"]))
    assert r.status_code == 422 and "command" in r.text and message in r.json()["detail"][0]["msg"], r.text
    plain = refused(application, token, job_body(team="nlp", cpu=1, memory="1GiB"))
    assert plain.status_code == 201, plain.text  # without a command: bookkeeping, as ever


def test_a_command_on_a_server_without_a_local_node_is_refused(tmp_path):
    application, token = make_app(tmp_path, run_as=RunAs({"*": SOMEONE}, service=SOMEONE, root=True))
    r = refused(application, token, job_body(cpu=1, memory="1GiB", command=["python", "train.py"]))
    assert r.status_code == 422 and "this server runs no commands: start it with --local-node NAME" in r.text, r.text


def test_a_command_too_large_for_the_local_node_is_refused(tmp_path, jobs_dir):
    application, token = make_app(tmp_path, cluster=box_cluster(), state_dir=tmp_path / "state",
                                  options=LoopOptions(local_node="far"), jobs_dir=jobs_dir,
                                  run_as=RunAs({"*": SOMEONE}, service=SOMEONE, root=True))
    r = refused(application, token, job_body(cpu=12, memory="1GiB", gpus=0, command=["true"]))
    assert r.status_code == 422 and "the node that runs commands (far) could never host" in r.text, r.text


def test_a_command_job_is_placed_on_the_local_node_and_other_jobs_as_before():
    """The built-in 120-node cluster: jobs without a command land exactly where they land on a server without a
    local node; a command job lands on the local node, though the policy would put it elsewhere."""
    nodes = default_cluster()
    shapes = [(4000, 8192, 1, 1000), (2000, 4096, 1, 500), (8000, 16384, 2, 1000), (1000, 2048, 0, 0)] * 10
    placed = {}
    controllers = {}
    for local in (None, str(nodes.name[0])):
        ctl = controllers[local] = Controller(nodes, [QueueSpec("default")], LoopOptions(local_node=local))
        for k, (cpu, memory, gpus, milli) in enumerate(shapes, 1):
            ctl.submit(k, JobSpec(f"j{k}", "default", cpu, memory, gpus, milli), 0.0)
            ctl.cycle(0.0)
        placed[local] = [ctl.jobs[k].placement for k in range(1, len(shapes) + 1)]
    assert placed[None] == placed[str(nodes.name[0])] and all(placed[None])
    plain = controllers[None]
    plain.submit(100, JobSpec("probe", "default", 1000, 2048, 1, 1000), 0.0)
    plain.cycle(0.0)
    elsewhere = plain.jobs[100].placement[0][0]
    local = next(str(n) for n, g in zip(nodes.name, nodes.num_gpus) if g and str(n) != elsewhere)
    ctl = Controller(nodes, [QueueSpec("default")], LoopOptions(local_node=local))
    ctl.submit(100, JobSpec("probe", "default", 1000, 2048, 1, 1000, command=("python", "train.py")), 0.0)
    ctl.cycle(0.0)
    assert [node for node, _ in ctl.jobs[100].placement] == [local]


@as_root
def test_serve_refuses_a_mapping_it_must_not_apply(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run-as").write_text("# team user\nvision nobody\nnlp\n")
    runner = CliRunner()
    for args, says in ((["--run-as", "vision=root"], "--run-as vision=root: 'root' has uid 0, and commands never "
                                                     "run as root"),
                       (["--run-as", "vision=qstest-no-such-user"], "no such user 'qstest-no-such-user'"),
                       (["--run-as-self"], "--run-as-self: this server runs as root, and commands never do"),
                       (["--run-as", "vision"], "--run-as 'vision': give TEAM=USER"),
                       (["--run-as-file", "run-as"], "--run-as-file run-as line 3: give TEAM=USER"),
                       (["--run-as", "vision=nobody", "--run-as", "vision=daemon"],
                        "team 'vision' is mapped to 'nobody' already")):
        result = runner.invoke(cli_app, ["serve", "--db", str(tmp_path / "q.db"), *args])
        assert result.exit_code == 2 and says in " ".join(result.output.split()), (args, result.output)
    assert not (tmp_path / "q.db").exists()  # refused before anything was stored


@as_root
def test_serve_says_who_runs_what(tmp_path, monkeypatch):
    """The start banner names the user of each team (uvicorn stubbed); the mapping of a file is the options'."""
    import importlib

    monkeypatch.chdir(tmp_path)
    serve_module = importlib.import_module("quasched.cli.serve")
    monkeypatch.setattr(serve_module, "listen", lambda host, port: None)
    def run(server: object, sockets: object) -> None:  # uvicorn's start: the app is built then, if not before
        getattr(server.config.app, "build", dict)()  # type: ignore[attr-defined]

    monkeypatch.setattr("uvicorn.Server.run", run)
    (tmp_path / "c.yaml").write_text("pools:\n  - {name: a, count: 2, cpu: 8, memory: 32Gi}\n")
    with os_users("f") as (user,):
        (tmp_path / "run-as").write_text(f"vision {user}  # the vision team\n")
        uid = pwd.getpwnam(user).pw_uid
        jobs = shared_dir()
        result = CliRunner().invoke(cli_app, ["serve", "--db", "q.db", "--cluster", "c.yaml", "--local-node", "a-1",
                                              "--run-as-file", "run-as", "--jobs-dir", str(jobs)])
    shutil.rmtree(jobs)
    banner = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert f"runs commands as vision={user} (uid {uid}); their directories in {jobs}" in banner
