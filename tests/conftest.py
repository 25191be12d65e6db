"""Shared fixtures: the read-only ``/work/shared`` folders beside the repository, a PostgreSQL server.

Each folder fixture skips its tests with the reason when its folder is absent;
the PostgreSQL fixtures fail when the server binaries are missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from pg import PostgresServer

from quasched.model import NodeSpec, Workload
from quasched.traces import load_openb_nodes, load_openb_pods
from quasched.traces.catalog import OPENB_ALL_NODES, OPENB_DIR, OPENB_NODES

SHARED = Path(__file__).parents[2] / "shared"


def _existing(path: Path, what: str, env: str) -> Path:
    if not path.exists():
        pytest.skip(f"{what} not found at {path} (set {env} to its folder)")
    return path


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the session (tests/pg.py)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """URL of a new, empty PostgreSQL database."""
    return postgres.create_database()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The trace folder: ``$QUASCHED_DATA``, else ``../shared/traces`` beside the repo."""
    path = Path(os.environ.get("QUASCHED_DATA") or SHARED / "traces")
    _existing(path / OPENB_DIR, "trace data", "QUASCHED_DATA")
    return path


@pytest.fixture(scope="session")
def shared_docs() -> Path:
    """``../shared/docs`` (the FGD compatibility spec)."""
    return _existing(SHARED / "docs", "shared docs", "nothing: it must sit beside the repo")


@pytest.fixture(scope="session")
def compat_dir() -> Path:
    """Folder of ``go_rng_cooked.txt``: ``$QUASCHED_COMPAT_DATA``, else ``../shared/data``."""
    path = Path(os.environ.get("QUASCHED_COMPAT_DATA") or SHARED / "data")
    _existing(path / "go_rng_cooked.txt", "go_rng_cooked.txt", "QUASCHED_COMPAT_DATA")
    return path


@pytest.fixture(scope="session")
def carbon_dir() -> Path:
    """Folder of the hourly grid intensity: ``$QUASCHED_CARBON``, else ``../shared/carbon``."""
    path = Path(os.environ.get("QUASCHED_CARBON") or SHARED / "carbon")
    _existing(path / "carbon_intensity_2023_hourly.csv", "carbon_intensity_2023_hourly.csv", "QUASCHED_CARBON")
    return path


class OpenbTraces:
    """Cached openb node and pod lists of a data directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cache
    def nodes(self, all_nodes: bool = False) -> NodeSpec:
        return load_openb_nodes(self.root / (OPENB_ALL_NODES if all_nodes else OPENB_NODES))

    @cache
    def pods(self, variant: str) -> Workload:
        """Pod list ``openb_pod_list_<variant>.csv``, e.g. ``pods("default")``."""
        return load_openb_pods(self.root / OPENB_DIR / f"openb_pod_list_{variant}.csv")


@pytest.fixture(scope="session")
def openb(data_dir: Path) -> OpenbTraces:
    return OpenbTraces(data_dir)
