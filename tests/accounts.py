"""Who runs the commands of test jobs: as root, throw-away OS users (``useradd --system --no-create-home``, named
``qstest<pid><suffix>``, removed after); otherwise the tests' own account (``--run-as-self``). Also a directory
those users reach and a Python they can run (the tests' own may live in a home they cannot enter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from quasched.service.executor.runas import RunAs, run_as

ROOT = os.geteuid() == 0


@contextmanager
def os_users(*suffixes: str) -> Iterator[list[str]]:
    """Create one system user per suffix (as root), yield their names, remove them."""
    names = [f"qstest{os.getpid()}{s}" for s in suffixes]
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], check=True)
            made.append(name)
        yield names
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False)


@contextmanager
def command_accounts(suffix: str = "runs") -> Iterator[RunAs]:
    """Every team's commands as one throw-away user (as root), else as the tests' own account."""
    if not ROOT:
        yield run_as(own=True)
        return
    with os_users(suffix) as (name,):
        yield run_as([f"*={name}"])


def shared_dir() -> Path:
    """A new directory under the system's temporary one that every user may search (mode 0711)."""
    path = Path(tempfile.mkdtemp(prefix="qstest-", dir="/tmp"))
    path.chmod(0o711)
    return path


def job_python() -> str:
    """A Python the commands' users can run: the tests' own, unless it lives where they cannot reach (as root, a
    home of mode 0700): then the system's."""
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    return system if ROOT and system is not None else sys.executable


def serve_options(accounts: RunAs, jobs_dir: Path) -> list[str]:
    """The ``quasched serve`` options of ``accounts`` and ``jobs_dir``."""
    who = ["--run-as-self"] if accounts.own else [f"--run-as={t}={a.name}" for t, a in accounts.teams.items()]
    return [*who, "--jobs-dir", str(jobs_dir)]
