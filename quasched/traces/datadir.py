"""Locating trace files: ``data_dir`` argument, then ``$QUASCHED_DATA``, then the user cache.

Files are named by their path relative to a data directory, e.g.
``alibaba-gpu-v2023/openb_pod_list_default.csv``. When none of the locations
holds the file it can be downloaded once from Alibaba's ``clusterdata``
repository into the cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from quasched.traces.errors import TraceError, TraceNotFound

ENV_VAR = "QUASCHED_DATA"
UPSTREAM = "https://raw.githubusercontent.com/alibaba/clusterdata/master/"
#: local folder -> folder in the upstream repository
UPSTREAM_DIRS = {
    "alibaba-gpu-v2023": "cluster-trace-gpu-v2023/csv",
    "alibaba-gpu-v2025": "cluster-trace-gpu-v2025",
}
DOWNLOAD_TIMEOUT = 10.0


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/quasched``, else ``~/.cache/quasched``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "quasched"


def search_dirs(data_dir: str | Path | None = None) -> list[tuple[str, Path]]:
    """The data directories searched, in order, with where each comes from; a :class:`TraceError` when the first
    one given is no folder (a typo would otherwise fall through to other data without a word). ``$QUASCHED_DATA`` behind
    a ``--data-dir`` is searched only if it is a folder."""
    dirs = [("--data-dir", Path(data_dir))] if data_dir else []
    if os.environ.get(ENV_VAR):
        dirs.append((ENV_VAR, Path(os.environ[ENV_VAR])))
    if dirs and not dirs[0][1].is_dir():
        origin, folder = dirs[0]
        raise TraceError(folder, f"{origin} {folder} is not a folder; pass the folder that holds "
                                 f"{', '.join(f'{d}/' for d in UPSTREAM_DIRS)}")
    return [*dirs[:1], *((o, f) for o, f in dirs[1:] if f.is_dir()), ("user cache", cache_dir())]


def upstream_url(relpath: str) -> str | None:
    """Download address of a trace file, ``None`` if it has none."""
    folder, _, name = relpath.partition("/")
    if folder not in UPSTREAM_DIRS or not name:
        return None
    return f"{UPSTREAM}{UPSTREAM_DIRS[folder]}/{name}"


def fetch(url: str, dest: Path, timeout: float = DOWNLOAD_TIMEOUT) -> None:
    """Fetch ``url`` to ``dest`` atomically (temporary file in the same folder, then rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            shutil.copyfileobj(response, out)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve_trace(relpath: str, data_dir: str | Path | None = None, *, download: bool = True) -> Path:
    """Path of trace file ``relpath``, downloading it into the cache if allowed and needed.

    Raises :class:`TraceNotFound` listing every location tried and how to fix it.
    """
    dirs = search_dirs(data_dir)
    for _, folder in dirs:
        if (folder / relpath).is_file():
            return folder / relpath
    cache = cache_dir()
    failure = ""
    url = upstream_url(relpath)
    if download and url:
        try:
            fetch(url, cache / relpath)
            return cache / relpath
        except OSError as exc:  # URLError, timeouts and disk errors are all OSError
            failure = f"Download from {url} failed: {exc}.\n"
    fix = (
        f"{failure}Fix: pass --data-dir DIR or set {ENV_VAR}=DIR, where DIR holds {relpath}, "
        f"or run once on a machine with internet access to download it into {cache}."
    )
    raise TraceNotFound(relpath, [f"{folder / relpath} ({origin})" for origin, folder in dirs], fix)
