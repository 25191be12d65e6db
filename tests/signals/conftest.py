"""The signals' fixtures: a local provider API (tests/signals/signal_api.py) and a clock set by the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from signal_api import T0, Clock, FakeApi


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)
