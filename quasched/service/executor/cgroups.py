"""Each job in its own cgroup (docs/service.md, "What a job can take"), as Slurm's proctrack/cgroup and
task/cgroup do: what the job's command starts stays in it (``setsid``, double forks), its memory and CPU
requests are its limits, and ending the job kills every process in it.

Both layouts: cgroup v2 (one unified hierarchy, ``cgroup.controllers`` at its root) and v1 (a hierarchy per
controller: ``memory``, ``cpu``, ``freezer``). A job's cgroup is ``quasched/<tag>-job-<id>-<run>`` below the
cgroup the service runs in, in every hierarchy used (``tag``: of the service's state directory, so two
services on one machine never share one). The run wrapper (:mod:`.wrapper`) creates it and moves itself
in to start the command; killing, the OOM count and removal are here for the wrapper and the executor."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
#: v1 hierarchies used: memory and CPU limits, and the freezer to kill without a race against forks
V1_CONTROLLERS = ("memory", "cpu", "freezer")
#: the key of the one hierarchy of v2
UNIFIED = "unified"
#: CFS period (µs) and the smallest quota the kernel takes
CPU_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
#: seconds given to emptying a cgroup (kill) and to removing it
KILL_S = 10.0
_NAME = re.compile(r"([0-9a-f]+)-job-(\d+)-(\d+)")


@dataclass(frozen=True)
class Hierarchy:
    """Where job cgroups go: per hierarchy (a v1 controller, or :data:`UNIFIED`) the cgroup the service runs in."""
    version: int
    bases: dict[str, Path]

    def dirs(self, name: str) -> dict[str, Path]:
        """Per hierarchy, the directory of cgroup ``name`` (relative)."""
        return {key: base / name for key, base in self.bases.items()}


def detect(root: Path = ROOT, own: Path = Path("/proc/self/cgroup")) -> Hierarchy | str:
    """The hierarchy job cgroups can go in, or why none can (not root, nothing mounted or writable)."""
    if os.geteuid() != 0:
        return "the service does not run as root"
    try:
        lines = [line.split(":", 2) for line in own.read_text().splitlines()]
    except OSError as err:
        return f"cannot read {own}: {err}"
    paths = {ctrl: path.lstrip("/") for _, ctrls, path in lines for ctrl in (ctrls.split(",") if ctrls else [""])}
    if (root / "cgroup.controllers").exists():
        mounts = {UNIFIED: (root, paths.get("", ""))}
    else:
        mounts = {c: (root / c, paths.get(c, "")) for c in V1_CONTROLLERS if (root / c / "cgroup.procs").exists()}
    bases = {key: mount / path if (mount / path).is_dir() else mount for key, (mount, path) in mounts.items()}
    bases = {key: base for key, base in bases.items() if os.access(base, os.W_OK)}
    if not bases:
        return f"no writable cgroup hierarchy under {root}"
    return Hierarchy(2 if UNIFIED in bases else 1, bases)


def tag_of(state_dir: Path) -> str:
    """The tag of a service's job cgroups: the first 8 hex digits of its state directory's SHA-256."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


def job_cgroup(tag: str, job_id: int, run: int) -> str:
    """The cgroup of run ``run`` of job ``job_id``, relative to the service's cgroup."""
    return f"quasched/{tag}-job-{job_id}-{run}"


def limits(version: int, memory_bytes: int | None, cpu_milli: int | None) -> list[tuple[str, str]]:
    """The (file, value) writes that limit a cgroup to ``memory_bytes`` (no swap beyond it) and ``cpu_milli``
    milli-CPUs (a CFS quota per 100 ms period), in the order the kernel takes them; None: no limit."""
    out: list[tuple[str, str]] = []
    if memory_bytes:
        out += [("memory.max", str(memory_bytes)), ("memory.swap.max", "0")] if version == 2 else \
            [("memory.limit_in_bytes", str(memory_bytes)), ("memory.memsw.limit_in_bytes", str(memory_bytes))]
    if cpu_milli:
        quota = max(MIN_QUOTA_US, cpu_milli * CPU_PERIOD_US // 1000)
        out += [("cpu.max", f"{quota} {CPU_PERIOD_US}")] if version == 2 else \
            [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]
    return out


def create(h: Hierarchy, name: str, memory_bytes: int | None, cpu_milli: int | None) -> list[str]:
    """Make cgroup ``name`` with its limits; the limits that could not be set (a file the kernel lacks, such as
    memsw without swap accounting, is skipped silently)."""
    dirs = h.dirs(name)
    for key, path in dirs.items():
        if h.version == 2:
            _enable_controllers(h.bases[key], path)
        path.mkdir(parents=True, exist_ok=True)
    problems = []
    for file, value in limits(h.version, memory_bytes, cpu_milli):
        key = UNIFIED if h.version == 2 else file.split(".")[0]
        target = dirs[key] / file if key in dirs else None
        if target is None or not target.exists():
            if not file.startswith(("memory.memsw", "memory.swap")):
                problems.append(f"{file}: not available")
            continue
        try:
            target.write_text(value)
        except OSError as err:
            problems.append(f"{file}: {err.strerror}")
    return problems


def _enable_controllers(base: Path, leaf: Path) -> None:
    """v2: make ``leaf`` below ``base``, enabling the memory and CPU controllers on the way (refused, e.g. in a
    cgroup that has processes: the job runs unlimited but still contained)."""
    node = base
    for part in leaf.relative_to(base).parts:
        for ctrl in set((node / "cgroup.controllers").read_text().split()) & {"memory", "cpu"}:
            _write(node / "cgroup.subtree_control", f"+{ctrl}")
        node = node / part
        node.mkdir(exist_ok=True)


def join(h: Hierarchy, name: str | None, pid: int = 0) -> None:
    """Move ``pid`` (0: the caller) into cgroup ``name``, or back into the service's cgroup (None)."""
    for key, base in h.bases.items():
        ((base / name) if name else base).joinpath("cgroup.procs").write_text(str(pid or os.getpid()))


def procs(h: Hierarchy, name: str) -> set[int]:
    """The live processes of cgroup ``name`` (none when it is gone; zombies left out)."""
    pids: set[int] = set()
    for path in h.dirs(name).values():
        try:
            pids |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
        except OSError:
            continue
    return {pid for pid in pids if alive(pid)}


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (/proc), None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    return start_ticks(pid) is not None


def signal_all(h: Hierarchy, name: str, sig: int, skip_group: int | None = None) -> None:
    """Send ``sig`` to every process of cgroup ``name`` but those of process group ``skip_group``."""
    for pid in procs(h, name):
        try:
            if skip_group is None or os.getpgid(pid) != skip_group:
                os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill(h: Hierarchy, name: str, timeout_s: float = KILL_S) -> bool:
    """SIGKILL every process of cgroup ``name`` until none is left: v2 ``cgroup.kill`` where present, else
    frozen (no fork in between), each process killed, thawed, repeated. Whether it is empty."""
    dirs = h.dirs(name)
    unified = dirs.get(UNIFIED)
    freezer = dirs.get("freezer") if h.version == 1 else unified
    deadline = time.monotonic() + timeout_s
    while procs(h, name):
        if unified is not None and (unified / "cgroup.kill").exists():
            _write(unified / "cgroup.kill", "1")
        else:
            _freeze(freezer, h.version, True, deadline)
            for pid in procs(h, name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _freeze(freezer, h.version, False, deadline)
        if time.monotonic() > deadline:
            return not procs(h, name)
        time.sleep(0.01)
    return True


def _freeze(path: Path | None, version: int, frozen: bool, deadline: float) -> None:
    """Freeze (or thaw) the cgroup at ``path``, waiting for a v1 freeze to complete (until ``deadline``)."""
    if path is None:
        return
    file, value = ("cgroup.freeze", "1" if frozen else "0") if version == 2 else \
        ("freezer.state", "FROZEN" if frozen else "THAWED")
    if not _write(path / file, value) or version == 2 or not frozen:
        return
    while time.monotonic() < deadline and _read(path / file) == "FREEZING":
        time.sleep(0.005)


def _write(path: Path, value: str) -> bool:
    """Write a cgroup file; False when that cannot be done (the cgroup is gone: emptied and removed)."""
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def oom_killed(h: Hierarchy, name: str) -> bool:
    """Whether the kernel's OOM killer killed a process of cgroup ``name`` (v2 ``memory.events``, v1
    ``memory.oom_control``'s ``oom_kill``, or ``memory.failcnt`` on kernels without that count)."""
    path = h.dirs(name).get(UNIFIED if h.version == 2 else "memory")
    if path is None:
        return False
    try:
        events = dict(line.split() for line in
                      (path / ("memory.events" if h.version == 2 else "memory.oom_control")).read_text().splitlines())
        if "oom_kill" in events or h.version == 2:
            return int(events.get("oom_kill", 0)) > 0
        return int((path / "memory.failcnt").read_text()) > 0
    except (OSError, ValueError):
        return False


def remove(h: Hierarchy, name: str, timeout_s: float = KILL_S) -> None:
    """Remove cgroup ``name`` (emptied by :func:`kill`; the kernel may take a moment to let it go)."""
    deadline = time.monotonic() + timeout_s
    for path in h.dirs(name).values():
        while True:
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)


def clear(h: Hierarchy, name: str) -> None:
    """Kill every process of cgroup ``name`` and remove it (nothing to do when it is gone)."""
    kill(h, name)
    remove(h, name)


def leftovers(h: Hierarchy, tag: str) -> list[tuple[int, int, str]]:
    """(job id, run, cgroup) of every job cgroup of the service tagged ``tag`` that exists."""
    found = set()
    for base in h.bases.values():
        try:
            names = [p.name for p in (base / "quasched").iterdir() if p.is_dir()]
        except OSError:
            continue
        for entry in names:
            match = _NAME.fullmatch(entry)
            if match and match.group(1) == tag:
                found.add((int(match.group(2)), int(match.group(3)), f"quasched/{entry}"))
    return sorted(found)
