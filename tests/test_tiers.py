"""The fast tier, ``pytest -m "not slow"``, collects on the core install: with every extra's package (and the test
tools of ``quasched[dev]``) unimportable, collection has no error, and each module it skips names its pip install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # one collection of the whole suite in a real process


def collect(env: dict[str, str]) -> subprocess.CompletedProcess:
    """``pytest --collect-only -m "not slow"`` with the pytest plugins of the core install only (hypothesis's)."""
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-m", "not slow", "-rs",
                           "-p", "no:cacheprovider", "-p", "_hypothesis_pytestplugin", "tests"],
                          env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


def test_the_fast_tier_collects_without_the_extras(core_only):
    done = collect(core_only)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ERROR" not in done.stdout and "Interrupted" not in done.stdout
    assert re.search(r"\d+/\d+ tests collected \(\d+ deselected\)", done.stdout), done.stdout[-2000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any("pip install 'quasched[quantum]'" in line for line in skips), skips  # tests/optimize/test_optimize_qubo.py
    assert all("pip install 'quasched[" in line for line in skips), skips
