"""Shared fixtures: where the tests find the public data they need, and a PostgreSQL server.

The data are never copied into the repository. They are found from one place: ``$QUASCHED_DATA``, the folder
holding the Alibaba traces (``alibaba-gpu-v2023/``, ``alibaba-gpu-v2025/``), else ``../shared/traces`` beside the
repository. The FGD artifact's golden results (``golden/``), its specification's reference vectors (``docs/``), Go's
random table (``data/``) and the grid carbon intensities (``carbon/``) sit beside that folder; ``QUASCHED_COMPAT_DATA``
and ``QUASCHED_CARBON`` override the last two. A test that needs one of them takes its fixture, which skips the test
with the reason and the variable to set when the folder is absent. The PostgreSQL fixtures skip without the
``postgres`` extra (psycopg) and fail when the server binaries are missing; a test that takes one is ``slow``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from extra import HIDE, needs
from pg import PostgresServer

from quasched.model import NodeSpec, Workload
from quasched.traces import load_openb_nodes, load_openb_pods
from quasched.traces.catalog import OPENB_ALL_NODES, OPENB_DIR, OPENB_NODES

#: the tests' folders mirror the package's rooms; each is importable by module name, as the root is, for the tests
#: that share fixtures and data with a test of another room (every test module's name is unique)
sys.path[1:1] = [str(d) for d in sorted(Path(__file__).parent.rglob("*")) if d.is_dir() and any(d.glob("test_*.py"))]

TRACES = Path(os.environ.get("QUASCHED_DATA") or Path(__file__).parents[2] / "shared" / "traces")
SHARED = TRACES.parent


def _existing(path: Path, what: str, env: str = "QUASCHED_DATA") -> Path:
    if not path.exists():
        pytest.skip(f"{what} not found at {path}: set {env} (see tests/conftest.py)")
    return path


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test on PostgreSQL: it starts a server."""
    for item in items:
        if "postgres" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the session (tests/pg.py)."""
    needs("psycopg", "postgres")
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
def core_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose Python cannot import any extra's package (tests/extra.py)."""
    folder = tmp_path_factory.mktemp("core-only")
    (folder / "sitecustomize.py").write_text(HIDE)
    return {**os.environ, "PYTHONPATH": str(folder), "MPLBACKEND": "Agg"}


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The trace folder: ``$QUASCHED_DATA``, else ``../shared/traces`` beside the repository."""
    _existing(TRACES / OPENB_DIR, "the Alibaba GPU traces")
    return TRACES


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    """The FGD artifact's published curves and per-event logs on openb-default (``golden/kss-default``)."""
    return _existing(SHARED / "golden" / "kss-default", "the FGD artifact's golden results")


@pytest.fixture(scope="session")
def shared_docs() -> Path:
    """The FGD artifact's specification, for its reference shuffle, tuning and rank vectors (``docs/``)."""
    return _existing(SHARED / "docs" / "fgd-compatible-simulation.md", "the FGD artifact's specification").parent


@pytest.fixture(scope="session")
def compat_dir() -> Path:
    """Folder of ``go_rng_cooked.txt``: ``$QUASCHED_COMPAT_DATA``, else ``data/`` beside the traces."""
    path = Path(os.environ.get("QUASCHED_COMPAT_DATA") or SHARED / "data")
    _existing(path / "go_rng_cooked.txt", "go_rng_cooked.txt", "QUASCHED_COMPAT_DATA")
    return path


@pytest.fixture(scope="session")
def carbon_dir() -> Path:
    """Folder of the hourly grid intensity: ``$QUASCHED_CARBON``, else ``carbon/`` beside the traces."""
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
