"""Every script in ``benchmarks/`` on the core install: ``--help`` works, and a mode that needs an extra exits with
one line naming the ``pip install`` that adds it, never a traceback. The extras' packages are hidden by a
``sitecustomize`` that makes their imports fail (the ``core_only`` fixture), in a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real process per script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if '__name__ == "__main__"' in p.read_text())
#: script and arguments of each mode that needs an extra -> the extra
NEEDS_EXTRA = {
    ("learn.py", "train"): "learn",
    ("batch.py", "ablation"): "quantum",
    ("kube_e2e.py", "--nodes", "2", "--pods", "2"): "kube",
    ("service_durability.py", "--db", "postgresql", "--jobs", "1"): "postgres",
    ("service_load.py", "--data-dir", ".", "--db", "postgresql", "--jobs", "1"): "postgres",
}


def run(args: tuple[str, ...], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / args[0]), *args[1:]], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_extras_are_hidden(core_only, tmp_path):
    done = subprocess.run([sys.executable, "-c", "import cma"], env=core_only, capture_output=True, text=True)
    assert done.returncode == 1 and "No module named 'cma'" in done.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_runs_on_the_core_install(script, core_only, tmp_path):
    done = run((script, "--help"), core_only, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "usage:" in done.stdout


@pytest.mark.parametrize("args", NEEDS_EXTRA, ids=lambda a: " ".join(a))
def test_a_mode_needing_an_extra_names_its_pip_install(args, core_only, tmp_path):
    done = run(args, core_only, tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("error:") and f"pip install 'quasched[{NEEDS_EXTRA[args]}]'" in done.stderr
