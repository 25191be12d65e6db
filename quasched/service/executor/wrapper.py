"""``python -m quasched.service.executor.wrapper [OPTIONS] EXIT_FILE -- ARGV...``: run a job's command and record
how it ended in ``EXIT_FILE``, so the service can read it even when it is not the wrapper's parent (it
restarted and re-attached).

``EXIT_FILE`` (JSON, written whole: a temporary file renamed) holds ``status`` (the child's exit code, or
``-N`` when signal ``N`` ended it), ``started`` and ``ended`` (the wrapper's wall clock around the child:
what the job is billed for), and ``oom`` (the kernel's OOM killer killed a process of the job's cgroup).

The wrapper is the leader of the job's session and process group. With ``--cgroup NAME`` it creates the
job's cgroup (:mod:`.cgroups`, with ``--memory-max`` and ``--cpu-max`` as its limits), moves itself in to
start the child, so that everything the child starts stays in it, and back out. With ``--log PATH`` the
child's stdout and stderr come through a pipe and the wrapper writes them to the capped log
(:mod:`.joblog`, ``--log-head`` and ``--log-tail`` bytes); without, the child inherits the wrapper's.
``--uid``, ``--gid``, ``--groups`` run the child as that user (umask 077) in ``--workdir``, which the wrapper
enters with that user's permissions (never as root: a directory the user may not enter is refused, even through
a symbolic link swapped after the service checked it); ``--env-file`` gives its environment
(the service starts the wrapper, as root, with a clean one: the job's variables never reach it).

The service signals the group (and, for SIGTERM, the rest of the cgroup); the wrapper outlives a SIGTERM
to record how the child ended (SIGKILL ends it, and then no status is recorded). When the child has
ended, the wrapper kills what is left of the job (every process of its cgroup, else of its process
group), writes the rest of the log, removes the cgroup and then writes the status: nothing of a job runs
on its devices after it ended, and its log is whole when its end is known."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from quasched.service.executor import cgroups, joblog
from quasched.service.executor.cgroups import Hierarchy
from quasched.service.executor.runas import write_private

#: seconds the log is read after the job was killed (in a process group, a process that left it may keep
#: the pipe open)
DRAIN_S = 5.0
CHUNK = 64 << 10


def write_status(path: str, status: int, started: float | None = None, ended: float | None = None,
                 oom: bool = False) -> None:
    """Write how the child ended to ``path`` atomically (mode 0600)."""
    record = {"status": status, "started": started, "ended": ended, "oom": oom}
    write_private(path, (json.dumps(record) + "\n").encode())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m quasched.service.executor.wrapper",
                                usage="%(prog)s [OPTIONS] EXIT_FILE -- PROGRAM [ARGS...]")
    p.add_argument("--uid", type=int, help="Run the command as this user id.")
    p.add_argument("--gid", type=int, help="... with this group id.")
    p.add_argument("--groups", type=lambda s: [int(g) for g in s.split(",") if g], default=None,
                   help="... and these supplementary group ids (comma-separated).")
    p.add_argument("--cgroup", help="The job's cgroup, relative to the wrapper's own (created, then removed).")
    p.add_argument("--memory-max", type=int, help="Its memory limit in bytes.")
    p.add_argument("--cpu-max", type=int, help="Its CPU limit in milli-CPUs (1000: one core).")
    p.add_argument("--log", type=Path, help="Write the command's stdout and stderr to this capped log.")
    p.add_argument("--log-head", type=int, default=joblog.HEAD, help="Bytes kept of the log's start.")
    p.add_argument("--log-tail", type=int, default=joblog.TAIL, help="Bytes kept of the log's end.")
    p.add_argument("--workdir", help="The command's working directory, entered with its user's permissions.")
    p.add_argument("--env-file", help="The command's environment: a JSON object (removed once read).")
    p.add_argument("exit_file", metavar="EXIT_FILE")
    return p


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    command = argv[split + 1:]
    args = parser().parse_args(argv[:split])
    if not command:
        parser().error("no command after --")
    log = joblog.Writer(args.log, joblog.Caps(args.log_head, args.log_tail)) if args.log else None

    def say(message: str) -> None:
        if log is not None:
            log.write(f"quasched: {message}\n".encode())
        else:
            print(f"quasched: {message}", file=sys.stderr, flush=True)

    hier = _cgroup(args, say)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))  # the child, in the same group, gets it too
    env = _env(args.env_file)
    user: dict[str, Any] = {} if args.uid is None else {
        "user": args.uid, "group": args.gid, "extra_groups": args.groups or [], "umask": 0o077}
    started = time.time()
    try:
        _enter(args)
        child: subprocess.Popen[bytes] | OSError | subprocess.SubprocessError = subprocess.Popen(
            command, restore_signals=True, env=env, stdout=subprocess.PIPE if log else None,
            stderr=subprocess.STDOUT if log else None, **user)
    except (OSError, subprocess.SubprocessError) as err:
        child = err
    os.chdir("/")  # the wrapper, root, holds nothing of the job's directory
    if hier is not None:
        cgroups.join(hier, None)  # the wrapper out of the job's limits (and of its kill)
    if not isinstance(child, subprocess.Popen):
        say(f"cannot start {command[0]!r}: {child}")
        _end(hier, args.cgroup, log, None)
        write_status(args.exit_file, 127, started, time.time())
        return 127
    reader = _copy(child.stdout, log) if log is not None and child.stdout is not None else None
    if stopping:  # asked to stop while the child was being started: it may have missed the signal
        child.send_signal(signal.SIGTERM)
    status = child.wait()
    ended = time.time()
    oom = hier is not None and cgroups.oom_killed(hier, args.cgroup)
    _end(hier, args.cgroup, log, reader)
    write_status(args.exit_file, status, started, ended, oom)
    return status


def _env(path: str | None) -> dict[str, str] | None:
    """The environment in ``path``, which is removed (None without: the wrapper's own)."""
    if path is None:
        return None
    with open(path) as f:
        env: dict[str, str] = json.load(f)
    os.unlink(path)
    return env


def _enter(args: argparse.Namespace) -> None:
    """Make ``--workdir`` the wrapper's working directory, which the child inherits, entered as the command's user
    would (with ``--uid``: that effective uid, gid and groups for the ``chdir`` only, so the kernel checks every
    step of the path, symbolic links included, as for the user; ``Popen(cwd=)`` would enter it as root)."""
    if args.workdir is None:
        return
    if args.uid is None:
        os.chdir(args.workdir)
        return
    groups, egid = os.getgroups(), os.getegid()
    try:
        os.setgroups(args.groups or [])
        os.setegid(args.gid if args.gid is not None else egid)
        os.seteuid(args.uid)
        os.chdir(args.workdir)
    finally:
        os.seteuid(0)
        os.setegid(egid)
        os.setgroups(groups)


def _cgroup(args: argparse.Namespace, say: Any) -> Hierarchy | None:
    """The job's cgroup made, with the wrapper in it (None: it runs in its process group only)."""
    if not args.cgroup:
        return None
    hier = cgroups.detect()
    if isinstance(hier, str):
        say(f"no cgroup: {hier}")
        return None
    try:
        for problem in cgroups.create(hier, args.cgroup, args.memory_max, args.cpu_max):
            say(f"cgroup {args.cgroup}: {problem}")
        cgroups.join(hier, args.cgroup)
    except OSError as err:
        say(f"no cgroup {args.cgroup}: {err}")
        return None
    return hier


def _copy(pipe: IO[bytes], log: joblog.Writer) -> threading.Thread:
    """A thread writing what comes through ``pipe`` to ``log`` until its end."""
    def run() -> None:
        fd = pipe.fileno()
        while chunk := os.read(fd, CHUNK):
            log.write(chunk)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _end(hier: Hierarchy | None, name: str | None, log: joblog.Writer | None,
         reader: threading.Thread | None) -> None:
    """Kill what is left of the job, write the rest of its log, remove its cgroup."""
    if hier is not None and name:
        cgroups.kill(hier, name)
    else:
        _kill_group()
    if reader is not None:
        reader.join(DRAIN_S)
    if log is not None and (reader is None or not reader.is_alive()):
        log.close()
    if hier is not None and name:
        cgroups.remove(hier, name)


def _kill_group() -> None:
    """SIGKILL every process of the wrapper's group but the wrapper, until none is left."""
    me = os.getpid()
    deadline = time.monotonic() + cgroups.KILL_S
    while time.monotonic() < deadline:
        left = [pid for pid in _pids() if pid != me and _group(pid) == me and cgroups.alive(pid)]
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
