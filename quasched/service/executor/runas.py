"""Who runs what: the OS account each team's commands run as, what a command starts with, and the service's
private files (docs/service.md, "Running commands safely").

The operator maps teams to unprivileged users (``quasched serve --run-as TEAM=USER``, ``--run-as-file``; team
``*``: any team not named), or, on a single-user set-up, lets every command run as the service's own account
(``--run-as-self``, the only way when the service is not root and so cannot switch users). A mapping to uid 0,
to the service's own account or to a missing user is refused at start. A command gets a login-like environment
of its account (:func:`login_env`, nothing of the service's own) and, unless it names a ``workdir``, a directory
of its own that its account owns (:func:`job_dir`); a ``workdir`` must be reachable by that account
(:func:`unreachable`)."""

from __future__ import annotations

import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

#: the team of a mapping that applies to every team not named
ANY_TEAM = "*"
#: a command's PATH (its job's ``env`` may give another)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: variables of the service's environment a command inherits: locale and time zone, besides ``LC_*``
INHERITED = frozenset({"LANG", "LANGUAGE", "TZ"})
#: what a team name is (as the API's ``team`` field), or ``*``
TEAM = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9_.-]*)$")


@dataclass(frozen=True)
class Account:
    """An OS user as commands run as it: uid, primary gid, supplementary groups, home and shell."""
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    @classmethod
    def of(cls, user: str | int) -> Account:
        """The account of ``user`` (a name or a uid) from the password and group databases; KeyError if none."""
        entry = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user)
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))  # as initgroups(3) sets them
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir, entry.pw_shell or "/bin/sh")

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid})"


@dataclass(frozen=True)
class RunAs:
    """Which account runs each team's commands: ``teams`` (team or ``*`` -> account), or ``own``: every command
    runs as the service's account (``--run-as-self``). ``service`` is the service's account; ``root`` whether the
    service runs as root (it can switch users)."""
    teams: Mapping[str, Account] = field(default_factory=dict)
    own: bool = False
    service: Account = field(default_factory=lambda: Account.of(os.geteuid()))
    root: bool = field(default_factory=lambda: os.geteuid() == 0)

    def account(self, team: str) -> Account | None:
        """The account ``team``'s commands run as (None: they do not run)."""
        if self.own:
            return self.service
        return self.teams.get(team, self.teams.get(ANY_TEAM))

    def switches(self, account: Account) -> bool:
        """Whether a command of ``account`` drops to it from the service's (root) account."""
        return account.uid != self.service.uid

    def refusal(self, team: str) -> str | None:
        """Why ``team``'s commands cannot run here (None: they can)."""
        if self.account(team) is not None:
            return None
        if not self.root:
            return (f"this server runs as {self.service.name}, not root, and cannot switch users: the operator "
                    f"starts it with --run-as-self to run commands as {self.service.name}")
        return (f"team {team!r} has no user to run commands as: the operator maps it to one with "
                f"`quasched serve --run-as {team}=USER` (or --run-as-file)")

    def describe(self) -> str:
        """Who runs what, for the start banner."""
        if self.own:
            return f"as the service's own account {self.service.describe()} (--run-as-self)"
        if self.teams:
            return "as " + ", ".join(f"{team}={a.describe()}" for team, a in sorted(self.teams.items()))
        if not self.root:
            return (f"of no team: this server runs as {self.service.name}, not root, and cannot switch users "
                    "(--run-as-self runs them as it)")
        return "of no team: none is mapped to a user (--run-as TEAM=USER)"


def parse_mapping(pairs: Sequence[str], file: Path | None) -> dict[str, str]:
    """Team -> user name of ``--run-as TEAM=USER`` options and ``--run-as-file`` lines (``team user``; ``#``
    comments); ValueError naming the option or line at fault."""
    found: list[tuple[str, str, str]] = []
    for pair in pairs:
        team, _, user = pair.partition("=")
        found.append((f"--run-as {pair!r}", team.strip(), user.strip()))
    if file is not None:
        try:
            text = file.read_text()
        except OSError as err:
            raise ValueError(f"--run-as-file {file}: {err.strerror or err}") from None
        for number, line in enumerate(text.splitlines(), 1):
            words = line.split("#", 1)[0].split()
            if words:
                found.append((f"--run-as-file {file} line {number}", *(words if len(words) == 2 else ("", ""))))
    mapping: dict[str, str] = {}
    for where, team, user in found:
        if not TEAM.match(team) or not user:
            raise ValueError(f"{where}: give TEAM=USER (a file: 'TEAM USER' lines), TEAM a team name or '*'")
        if mapping.get(team, user) != user:
            raise ValueError(f"{where}: team {team!r} is mapped to {mapping[team]!r} already")
        mapping[team] = user
    return mapping


def run_as(pairs: Sequence[str] = (), file: Path | None = None, own: bool = False) -> RunAs:
    """The mapping of ``--run-as``, ``--run-as-file`` and ``--run-as-self``, every user resolved; ValueError for
    a missing user, uid 0, the service's own account, or a mapping the service cannot apply."""
    mapping = parse_mapping(pairs, file)
    service = Account.of(os.geteuid())
    root = service.uid == 0
    if own and mapping:
        raise ValueError("--run-as-self runs every command as the service's account: give it or --run-as, not both")
    if own and root:
        raise ValueError("--run-as-self: this server runs as root, and commands never do: map the teams to "
                         "unprivileged users with --run-as TEAM=USER")
    if mapping and not root:
        raise ValueError(f"--run-as: switching users needs root, and this server runs as {service.name}: give "
                         f"--run-as-self to run every command as {service.name}")
    teams: dict[str, Account] = {}
    for team, user in mapping.items():
        try:
            account = Account.of(user)
        except KeyError:
            raise ValueError(f"--run-as {team}={user}: no such user {user!r}") from None
        if account.uid == 0:
            raise ValueError(f"--run-as {team}={user}: {user!r} has uid 0, and commands never run as root")
        teams[team] = account
    return RunAs(teams, own, service, root)


def login_env(account: Account, service_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A command's starting environment: ``PATH``, ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL`` of ``account``,
    and the locale and time zone of the service's environment (nothing else of it)."""
    env = {"PATH": DEFAULT_PATH, "HOME": account.home, "USER": account.name, "LOGNAME": account.name,
           "SHELL": account.shell}
    base = os.environ if service_env is None else service_env
    env.update((k, v) for k, v in base.items() if k in INHERITED or k.startswith("LC_"))
    return env


def unreachable(path: Path, account: Account) -> str | None:
    """Why ``account`` cannot enter the directory ``path`` (None: it can): each directory from ``/`` down must let
    it search (its owner, group or other execute bit; access control lists are not read)."""
    target = Path(os.path.realpath(path))
    for step in [*reversed(target.parents), target]:
        try:
            info = os.stat(step)
        except OSError as err:
            return f"{step}: {err.strerror}"
        if not stat.S_ISDIR(info.st_mode):
            return f"{step} is not a directory"
        if info.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == account.gid or info.st_gid in account.groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if account.uid != 0 and not info.st_mode & bit:
            return f"{step} is not searchable by user {account.describe()}"
    return None


def jobs_root(path: Path, accounts: Sequence[Account]) -> Path:
    """The directory of the jobs' own directories, created (mode 0711: each account reaches its job's directory,
    none lists the others); ValueError when one of ``accounts`` cannot reach it."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o711)
    for account in accounts:
        problem = unreachable(path, account)
        if problem:
            raise ValueError(f"--jobs-dir {path}: {problem}; give a --jobs-dir every mapped user can reach")
    return path


def job_dir(root: Path, job_id: int, account: Account, chown: bool) -> Path:
    """Job ``job_id``'s own working directory under ``root``, owned by ``account`` (``chown``: the service is root)
    and mode 0700; PermissionError if it exists and belongs to another account."""
    path = root / str(job_id)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != account.uid:
            raise PermissionError(f"{path} exists and is not a directory of user {account.describe()}") from None
        return path
    if chown:
        os.chown(path, account.uid, account.gid)
    os.chmod(path, 0o700)
    return path


def private_fd(path: Path | str, flags: int) -> int:
    """``os.open`` of a file of the service's, created mode 0600; a symbolic link at ``path`` is refused (ELOOP), so
    no one who could plant one makes the service write through it."""
    return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def write_private(path: Path | str, data: bytes) -> None:
    """Write ``path`` whole, mode 0600: a temporary file beside it, created anew (never through what was there),
    renamed over it."""
    tmp = f"{path}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    with os.fdopen(private_fd(tmp, os.O_WRONLY | os.O_EXCL), "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def private(path: Path, mode: int) -> None:
    """Give ``path`` (if it exists) ``mode``: the service's files are its own (0700 directories, 0600 files)."""
    try:
        os.chmod(path, mode)
    except FileNotFoundError:
        pass


def private_database(db_file: Path | None) -> None:
    """A SQLite database and its journal files, readable by the service's account only (0600)."""
    if db_file is not None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            private(db_file.with_name(db_file.name + suffix), 0o600)

