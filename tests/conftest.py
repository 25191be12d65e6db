"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared trace folder: ``$QUASCHED_DATA``, else ``../shared/traces`` beside the repo."""
    path = Path(os.environ.get("QUASCHED_DATA") or Path(__file__).parents[2] / "shared" / "traces")
    if not (path / "alibaba-gpu-v2023").is_dir():
        pytest.skip(f"trace data not found in {path} (set QUASCHED_DATA to the traces folder)")
    return path
