"""Runs the commands of jobs placed on this machine's node (docs/service.md, "Running jobs").

The scheduling loop decides; the :class:`Executor` follows in its own thread, so starting and
watching processes never blocks a cycle. After every persisted change the service hands it the
jobs that changed (:meth:`Executor.sync`); the thread then

- starts a running job's command that has no process yet, under :mod:`.wrapper` in its own
  session and process group and, run as root, its own cgroup (:mod:`.cgroups`: its memory and CPU
  requests as limits), with the devices quasched chose in its environment (:func:`job_env`), stdout
  and stderr in the capped log ``STATE_DIR/jobs/<id>.log`` (:mod:`.joblog`, written by the wrapper);
- sends SIGTERM to the group and the cgroup of a job that is preempting or stopping, and kills every
  process of the cgroup (else the group) of a job that no longer holds its resources (the grace
  period is the loop's: it ends that state);
- reports each process's end to the loop (the controller's ``exited``: :meth:`quasched.service.loop.runs.Runs.exited`),
  with the exit status, the wall-clock start and end and the OOM kill the wrapper recorded, and the
  log's last lines; past the team's log cap, it removes the logs of the team's oldest finished jobs.

Each run leaves ``<id>.run.json`` (run number, pid and the pid's start time in /proc, team, cgroup)
and the wrapper's ``<id>.<run>.exit``. After a restart of the service, :meth:`Executor.recover`
re-attaches to the runs still alive (same pid *and* start time: a reused pid is not the job's),
reports those that ended meanwhile with their recorded status, and reports as lost (failed, ``Lost``)
those that died without one; a job the store says runs but that never started is started. A run whose
pid was never recorded (the service died starting it) is found by its wrapper's command line, or started
if its wrapper never read its environment file (so its command never ran). The
cgroups of runs whose job no longer holds its resources are emptied and removed, and so is the
environment file (``<id>.<run>.env``, mode 0600 like every file here) of any run not re-attached.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from quasched.service.domain import Job, JobState
from quasched.service.executor import cgroups, joblog
from quasched.service.executor.cgroups import Hierarchy, start_ticks
from quasched.service.executor.runas import RunAs, job_dir, jobs_root, login_env, private, unreachable, write_private
from quasched.traces.units import parse_memory

#: seconds between checks of the running processes
POLL_S = 0.1
#: lines and characters of a log's end kept in a failed job's reason
TAIL_LINES = 20
TAIL_CHARS = 4000
#: node label giving the memory of one GPU device (e.g. 80Gi) when NVML does not
GPU_MEMORY_LABEL = "gpu-memory"

Report = Callable[[Callable[[Any, float], Any]], Any]


@dataclass(frozen=True)
class LocalGpus:
    """What is known of this machine's GPU devices: UUIDs (NVML; None: use indices) and memory per device."""
    uuids: tuple[str, ...] | None = None
    memory_mib: int | None = None


def wrapper_pid(exit_file: Path) -> int | None:
    """The pid of the live run wrapper (this service's user's, :func:`Executor._launch`'s command line) writing
    ``exit_file``, None if there is none."""
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace").split("\0")
            mine = os.stat(f"/proc/{name}").st_uid == os.geteuid()
        except OSError:
            continue
        if mine and argv[1:4] == ["-I", "-m", "quasched.service.executor.wrapper"] and "--" in argv and \
                argv[argv.index("--") - 1] == str(exit_file) and start_ticks(int(name)) is not None:
            return int(name)
    return None


def job_env(job: Job, gpus: LocalGpus, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of ``job``'s command: ``base`` (its account's, :func:`~.runas.login_env`), the job's, then
    the devices chosen:
    ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` (UUIDs when NVML gave them, else indices in PCI
    bus order), and for a share of one device ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``QUASCHED_GPU_SHARE``
    and, when the device memory is known, ``QUASCHED_GPU_MEMORY_MIB`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``."""
    env = dict(base)
    env.update(job.spec.env)
    devices = [d for _, ds in job.placement[:1] for d in ds]
    names = [gpus.uuids[d] if gpus.uuids is not None else str(d) for d in devices]
    env.update(CUDA_VISIBLE_DEVICES=",".join(names), NVIDIA_VISIBLE_DEVICES=",".join(names) or "void",
               CUDA_DEVICE_ORDER="PCI_BUS_ID", QUASCHED_JOB_ID=str(job.id), QUASCHED_JOB_NAME=job.spec.name)
    milli = job.spec.gpu_milli
    if devices and milli < 1000:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(math.ceil(milli / 10))
        env["QUASCHED_GPU_SHARE"] = f"{milli / 1000:g}"
        if gpus.memory_mib:
            mib = gpus.memory_mib * milli // 1000
            env["QUASCHED_GPU_MEMORY_MIB"] = str(mib)
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mib}M"
    return env


def gpus_of_labels(labels: dict[str, str]) -> LocalGpus:
    """Device memory from a node's ``gpu-memory`` label (no UUIDs)."""
    text = labels.get(GPU_MEMORY_LABEL)
    return LocalGpus(memory_mib=parse_memory(text) if text else None)


def log_tail(path: Path) -> str:
    """The last lines of a log's view (at most :data:`TAIL_LINES` lines and :data:`TAIL_CHARS` characters)."""
    text = joblog.tail(path, 4 * TAIL_CHARS, TAIL_LINES)[0].decode(errors="replace")
    return text.rstrip("\n")[-TAIL_CHARS:]


@dataclass
class Run:
    """One run of a job's command: the wrapper's pid (its group and session), its start ticks, its Popen when
    this service started it (None after re-attaching), its cgroup (None: its process group only), and whether
    it was sent SIGTERM or SIGKILL."""
    job_id: int
    run: int
    pid: int
    ticks: int | None
    popen: subprocess.Popen[bytes] | None = None
    cgroup: tuple[Hierarchy, str] | None = None
    signalled: set[int] = field(default_factory=set)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.ticks is not None and start_ticks(self.pid) == self.ticks

    def signal(self, sig: int) -> None:
        """``sig`` to the wrapper's group and every other process of the cgroup; SIGKILL empties and removes
        the cgroup before it returns."""
        if sig in self.signalled:
            return
        self.signalled.add(sig)
        if self.cgroup is not None and sig == signal.SIGKILL:
            cgroups.clear(*self.cgroup)
        elif self.cgroup is not None:
            cgroups.signal_all(*self.cgroup, sig, skip_group=self.pid)  # the group gets it below
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass


class Executor:
    """Starts, signals and watches the commands of jobs on node ``node`` (module docstring); ``report(change)``
    applies ``change(controller, now)`` as a service mutation."""

    def __init__(self, node: str, state_dir: Path, report: Report, gpus: LocalGpus = LocalGpus(),
                 logs: joblog.Caps = joblog.Caps(), team_log_cap: int = joblog.TEAM_CAP,
                 run_as: RunAs | None = None, jobs_dir: Path | None = None) -> None:
        """``run_as``: who runs each team's commands (default: nobody); ``jobs_dir``: where each job gets its own
        working directory (default: ``quasched-jobs`` beside ``state_dir``)."""
        self.node = node
        self.dir = state_dir.resolve() / "jobs"
        self.dir.mkdir(parents=True, exist_ok=True)
        private(state_dir, 0o700)  # the logs and run records are the service's: no job reads them
        private(self.dir, 0o700)
        self.run_as = run_as if run_as is not None else RunAs()
        accounts = [self.run_as.service] if self.run_as.own else list(self.run_as.teams.values())
        self.jobs_dir = jobs_root(jobs_dir or state_dir.resolve().parent / "quasched-jobs", accounts)
        self.report = report
        self.gpus = gpus
        self.logs, self.team_log_cap = logs, team_log_cap
        found = cgroups.detect()
        self.cgroups: Hierarchy | None = found if isinstance(found, Hierarchy) else None
        self.tag = cgroups.tag_of(state_dir)
        if isinstance(found, str):
            print(f"quasched: jobs run in process groups, not cgroups (no limits, no OOM report; a process "
                  f"that leaves its group escapes the end of its job): {found}", file=sys.stderr)
        self.runs: dict[int, Run] = {}
        self._inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()  # None: stop
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ files
    def log_path(self, job_id: int) -> Path:
        return self.dir / f"{job_id}.log"

    def _record(self, job_id: int) -> Path:
        return self.dir / f"{job_id}.run.json"

    def _exit_file(self, job_id: int, run: int) -> Path:
        return self.dir / f"{job_id}.{run}.exit"

    def _env_file(self, job_id: int, run: int) -> Path:
        return self.dir / f"{job_id}.{run}.env"

    def _recorded(self) -> list[int]:
        """The ids of the jobs with a run record."""
        names = (path.name.removesuffix(".run.json") for path in self.dir.glob("*.run.json"))
        return [int(name) for name in names if name.isdigit()]

    def _read_record(self, job_id: int) -> dict[str, Any] | None:
        try:
            record = json.loads(self._record(job_id).read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def _status(self, job_id: int, run: int) -> dict[str, Any] | None:
        """What the wrapper recorded of the run's end (:func:`.wrapper.write_status`), None if nothing."""
        try:
            status = json.loads(self._exit_file(job_id, run).read_text())
        except (OSError, ValueError):
            return None
        if isinstance(status, int):  # a wrapper from before the times were recorded
            return {"status": status}
        return status if isinstance(status, dict) and isinstance(status.get("status"), int) else None

    def _cgroup(self, record: dict[str, Any]) -> tuple[Hierarchy, str] | None:
        name = record.get("cgroup")
        return (self.cgroups, name) if self.cgroups is not None and isinstance(name, str) else None

    # ------------------------------------------------------------ the service's side
    def here(self, job: Job) -> bool:
        """Whether ``job`` has a command and a pod on this node."""
        return bool(job.spec.command) and any(node == self.node for node, _ in job.placement)

    def sync(self, jobs: Iterable[Job]) -> None:
        """Jobs that changed (called under the service's lock; only queues them for the thread)."""
        for job in jobs:
            if job.spec.command:
                self._inbox.put(_copy(job))

    def recover(self, jobs: Sequence[Job]) -> None:
        """At start: re-attach to the runs of ``jobs`` (the unfinished ones) still alive, report the others, and
        kill any run alive whose job no longer holds its resources here (the service died before it could)."""
        now_ended: list[tuple[int, dict[str, Any] | None]] = []
        here = {job.id: job for job in jobs if job.state.holds_resources and self.here(job)}
        for job_id in self._recorded():
            record = self._read_record(job_id)
            stale = job_id not in here or record is not None and record.get("run") != here[job_id].restarts
            if stale and record and record.get("pid") and start_ticks(record["pid"]) == record.get("ticks"):
                Run(job_id, record.get("run", 0), record["pid"], record["ticks"],
                    cgroup=self._cgroup(record)).signal(signal.SIGKILL)
        if self.cgroups is not None:
            for job_id, run, name in cgroups.leftovers(self.cgroups, self.tag):
                if job_id not in here or here[job_id].restarts != run:  # its job has moved on
                    cgroups.clear(self.cgroups, name)
        for job in here.values():
            record = self._read_record(job.id)
            if record is not None and record.get("run") == job.restarts and record.get("pid") is None:
                record = self._unrecorded(job, record)
            if record is None or record.get("run") != job.restarts:
                self._inbox.put(_copy(job))  # committed as running, never started: start it now
                continue
            status = self._status(job.id, job.restarts)
            ticks = record.get("ticks")
            if status is None and record.get("pid") and ticks is not None and start_ticks(record["pid"]) == ticks:
                self.runs[job.id] = Run(job.id, job.restarts, record["pid"], ticks, cgroup=self._cgroup(record))
                self._inbox.put(_copy(job))  # preempting or stopping: signal it again
            else:
                now_ended.append((job.id, status))
        attached = {self._env_file(run.job_id, run.run) for run in self.runs.values()}
        for path in self.dir.glob("*.env"):  # a job's variables its wrapper never read (it died first)
            if path not in attached:
                path.unlink(missing_ok=True)
        for job_id, status in now_ended:
            cgroup = self._cgroup(self._read_record(job_id) or {})
            if cgroup is not None:  # what its wrapper left, if it was killed
                cgroups.clear(*cgroup)
            self._ended(job_id, status, lost="its process ended while the service was down and left no exit status")

    def _unrecorded(self, job: Job, record: dict[str, Any]) -> dict[str, Any] | None:
        """The record of a run the service died starting (no pid recorded): with the pid of its wrapper if it
        runs; None if it never read its environment (its command never ran: start it); else as it is."""
        pid = wrapper_pid(self._exit_file(job.id, job.restarts))
        if pid is not None:
            record = {**record, "pid": pid, "ticks": start_ticks(pid)}
            _write_json(self._record(job.id), record)
            return record
        never_ran = self._env_file(job.id, job.restarts).exists() and self._status(job.id, job.restarts) is None
        return None if never_ran else record

    @property
    def running(self) -> bool:
        """Whether the thread runs (between :meth:`start` and :meth:`stop`)."""
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="quasched-executor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop watching once what was asked before is done (the processes run on; a restart re-attaches)."""
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ------------------------------------------------------------ the thread
    def _loop(self) -> None:
        """Apply the changes queued, then check the processes, until :meth:`stop`'s marker (None) comes:
        every change queued before it is applied (a kill is never dropped)."""
        stopping = False
        while not stopping:
            try:
                job = self._inbox.get(timeout=POLL_S)
                while not stopping:
                    if job is None:
                        stopping = True
                    else:
                        self._apply_logged(job)
                        job = self._inbox.get_nowait()
            except queue.Empty:
                pass
            try:
                self._watch()
            except Exception as err:  # keep watching; the next round retries
                print(f"quasched: executor: {err!r}", file=sys.stderr)

    def _apply_logged(self, job: Job) -> None:
        """:meth:`_apply`; an error is printed, and the thread goes on with the next change."""
        try:
            self._apply(job)
        except Exception as err:
            print(f"quasched: executor: job {job.id}: {err!r}", file=sys.stderr)

    def _apply(self, job: Job) -> None:
        run = self.runs.get(job.id)
        wanted = job.state.holds_resources and self.here(job)
        if run is not None and (not wanted or run.run != job.restarts):
            run.signal(signal.SIGKILL)  # its resources are gone (or it was placed anew)
        elif run is not None and job.state in (JobState.PREEMPTING, JobState.STOPPING):
            run.signal(signal.SIGTERM)
        if wanted and job.state == JobState.RUNNING and (run is None or run.run != job.restarts):
            if run is not None:
                self._reap(run)
            try:
                self.runs[job.id] = self._launch(job)
            except OSError as err:
                message = f"quasched: cannot start the command: {err}"
                joblog.append(self.log_path(job.id), self.logs, f"{message}\n".encode())
                self.report(lambda ctl, now: ctl.exited(job.id, now, 127, message))

    def _launch(self, job: Job) -> Run:
        record, exit_file = self._record(job.id), self._exit_file(job.id, job.restarts)
        exit_file.unlink(missing_ok=True)
        workdir, as_user = self._as_user(job)
        joblog.append(self.log_path(job.id), self.logs, f"--- quasched: run {job.restarts + 1} of job {job.id} on "
                      f"{self.node} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode())
        limits, cgroup = self._limits(job)
        fields = {"run": job.restarts, "team": job.spec.team, "cgroup": cgroup and cgroup[1]}
        _write_json(record, {**fields, "pid": None, "ticks": None})  # a crash now: recover() finds the wrapper
        popen = subprocess.Popen([sys.executable, "-I", "-m", "quasched.service.executor.wrapper", *limits, *as_user,
                                  "--workdir", str(workdir), str(exit_file), "--", *job.spec.command],
                                 stdin=subprocess.DEVNULL, cwd="/", env={},
                                 start_new_session=True)  # the job's variables: --env-file; its workdir: the wrapper's
        ticks = start_ticks(popen.pid)
        _write_json(record, {**fields, "pid": popen.pid, "ticks": ticks})
        return Run(job.id, job.restarts, popen.pid, ticks, popen, cgroup)

    def _as_user(self, job: Job) -> tuple[Path, list[str]]:
        """The working directory of ``job``'s command and the wrapper's options that run it as its team's account
        (uid, gid, groups) in its environment (a private file); PermissionError when it cannot run."""
        account = self.run_as.account(job.spec.team)
        if account is None:
            raise PermissionError(self.run_as.refusal(job.spec.team))
        switch = self.run_as.switches(account)
        workdir = Path(job.spec.workdir) if job.spec.workdir else job_dir(self.jobs_dir, job.id, account, switch)
        problem = unreachable(workdir, account)
        if problem:
            raise PermissionError(f"workdir {workdir}: {problem}")
        env_file = self._env_file(job.id, job.restarts)
        _write_json(env_file, job_env(job, self.gpus, login_env(account)))
        user = ["--uid", str(account.uid), "--gid", str(account.gid),
                "--groups", ",".join(map(str, account.groups))] if switch else []
        return workdir, [*user, "--env-file", str(env_file)]

    def _limits(self, job: Job) -> tuple[list[str], tuple[Hierarchy, str] | None]:
        """The wrapper's options of what ``job`` can take (its cgroup and limits, its log's caps), and its cgroup."""
        options = ["--log", str(self.log_path(job.id)), "--log-head", str(self.logs.head),
                   "--log-tail", str(self.logs.tail)]
        if self.cgroups is None:
            return options, None
        name = cgroups.job_cgroup(self.tag, job.id, job.restarts)
        return [*options, "--cgroup", name, "--memory-max", str(job.spec.memory_mib << 20),
                "--cpu-max", str(job.spec.cpu_milli)], (self.cgroups, name)

    def _watch(self) -> None:
        for run in list(self.runs.values()):
            if run.alive():
                continue
            self._reap(run)
            if run.cgroup is not None:  # the wrapper emptied and removed it, unless it was killed itself
                cgroups.clear(*run.cgroup)
            if signal.SIGKILL in run.signalled:
                continue  # killed because its job moved on: nothing to report
            status = self._status(run.job_id, run.run)
            if status is None and run.popen is not None:
                status = {"status": run.popen.returncode}  # the wrapper itself was killed
            self._ended(run.job_id, status, lost="its process group ended without an exit status")

    def _reap(self, run: Run) -> None:
        if run.popen is not None:
            try:
                run.popen.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        if self.runs.get(run.job_id) is run:
            del self.runs[run.job_id]

    def _ended(self, job_id: int, status: dict[str, Any] | None, lost: str) -> None:
        """Report a run's end: its exit status, and the wrapper's times of it (billing) and OOM kill."""
        if status is None:
            self.report(lambda ctl, now: ctl.lost(job_id, now, lost))
        else:
            code, oom = status["status"], bool(status.get("oom"))
            started, ended = status.get("started"), status.get("ended")
            ran = (float(started), float(ended)) if isinstance(started, (int, float)) and \
                isinstance(ended, (int, float)) else None
            tail = log_tail(self.log_path(job_id)) if code != 0 else ""
            self.report(lambda ctl, now: ctl.exited(job_id, now, code, tail, ran=ran, oom=oom))
        record = self._read_record(job_id)
        if record is not None:
            self._trim_logs(record.get("team"))

    def _trim_logs(self, team: object) -> None:
        """While the logs of ``team``'s jobs take more than the team's cap, remove its oldest finished job's."""
        mine = []
        for job_id in self._recorded():
            record = self._read_record(job_id)
            if record is not None and record.get("team") == team:
                size = sum(f.stat().st_size for f in joblog.files(self.log_path(job_id)))
                mine.append((self._record(job_id).stat().st_mtime, job_id, size))
        total = sum(size for *_, size in mine)
        for _, job_id, _ in sorted(mine):
            if total <= self.team_log_cap:
                return
            if job_id not in self.runs:
                total -= joblog.remove(self.log_path(job_id), f"--- quasched: log removed: the logs of team "
                                                                 f"{team} took more than its cap ---")


def _copy(job: Job) -> Job:
    """What the thread needs of a job, frozen at this change (the loop goes on changing the original)."""
    return Job(job.id, job.spec, job.priority, job.submitted_at, job.seq, job.state, job.started_at,
               placement=list(job.placement), restarts=job.restarts)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    write_private(path, json.dumps(value).encode())
