"""``quasched serve`` (or ``federate``: :class:`FrontProcess`) in a subprocess on 127.0.0.1, for tests and benchmarks: start, SIGKILL, pause
(SIGSTOP) and resume (SIGCONT), restart on the same database. The admin token is read from the file the
first start writes (``quasched.token`` beside a SQLite database, else in the server's directory)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import httpx
from pg import free_port

QUASCHED = Path(sys.executable).with_name("quasched")


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` until it holds; TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


class ServeProcess:
    """One ``quasched serve --db DB`` in ``workdir`` (``extra``: more options); restartable."""

    def __init__(self, db: str, workdir: Path, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        self.db, self.workdir, self.port, self.extra = db, workdir, port or free_port(), extra
        self.token = ""
        self.proc: subprocess.Popen[str] | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.output: list[str] = []

    #: the line of its output that says it has started, and the name of the token file its first start writes
    started_line, token_name = "dashboard", "quasched.token"

    def command(self) -> list[str]:
        return [str(QUASCHED), "serve", "--port", str(self.port), "--db", self.db, *self.extra]

    def start(self) -> None:
        """Start it and wait until it has started (a leader or a standby)."""
        self.output = []
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            self.output.append(line)
            if self.started_line in line:
                break
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {''.join(self.output)}")
        threading.Thread(target=self._drain, daemon=True).start()
        sqlite = self.db.removeprefix("sqlite:///")
        token_file = (Path(sqlite).parent if sqlite != self.db else self.workdir) / self.token_name
        self.token = (self.workdir / token_file).read_text().strip()
        wait_for(self.started, 60, "the server starts")

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def _get(self, path: str) -> int:
        try:
            return httpx.get(self.url + path, timeout=2).status_code
        except httpx.TransportError:
            return 0

    def started(self) -> bool:
        """Whether it has started, as the leader or a standby (``/healthz`` is "ok", not "starting")."""
        try:
            return httpx.get(self.url + "/healthz", timeout=2).json()["status"] == "ok"
        except (httpx.TransportError, ValueError, KeyError):
            return False

    def ready(self) -> bool:
        """Whether it is the leader (``/readyz`` is 200)."""
        return self._get("/readyz") == 200

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait()


class FrontProcess(ServeProcess):
    """One ``quasched federate --members MEMBERS --db DB`` in ``workdir``."""

    started_line, token_name = "quasched federate:", "quasched-front.token"

    def __init__(self, db: str, workdir: Path, members: Path, extra: tuple[str, ...] = ()) -> None:
        super().__init__(db, workdir, extra=extra)
        self.members = members

    def command(self) -> list[str]:
        return [str(QUASCHED), "federate", "--members", str(self.members), "--port", str(self.port), "--db", self.db,
                "--token-file", str(self.workdir / self.token_name), *self.extra]
