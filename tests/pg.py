"""A throwaway PostgreSQL server for tests: Debian's binaries, a cluster in a temporary folder.

Listens on 127.0.0.1 (a free port) and on a unix socket in its folder, trusts
local connections, runs without fsync. As root, the server runs as the
``postgres`` OS user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL = "install it (Debian: apt-get install -y postgresql; .ci/run does this)"


def find_bin() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl``."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")
             if Path(p).with_name("pg_ctl").exists()]
    if not found:
        raise RuntimeError(f"PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: {INSTALL}")
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """Start with :meth:`start`, make databases with :meth:`create_database`, then :meth:`stop`."""

    def __init__(self) -> None:
        self.bin = find_bin()
        owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None  # the user Debian's package creates
        self._as = ["runuser", "-u", "postgres", "--"] if owner else []
        self.dir = Path(tempfile.mkdtemp(prefix="quasched-pg-"))
        if owner:
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.port = free_port()
        self._names = itertools.count()

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        done = subprocess.run([*self._as, str(self.bin / tool), *args], capture_output=True, text=True)
        if check and done.returncode:
            log = self.dir / "log"
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}"
                               + (log.read_text() if log.exists() else ""))

    def start(self) -> None:
        data = self.dir / "data"
        self._run("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.dir / "log"), "-w", "start")

    def create_database(self) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg  # the postgres extra: the fixture skips without it

        name = f"test{next(self._names)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the server (if it runs) and remove its folder."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
