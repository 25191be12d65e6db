"""The FGD-artifact compatibility package: packaged Go table, fresh-install ``--rng go``, layering."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from repo import REPO

from quasched.model.gorand import COOKED_FILE, load_cooked

PACKAGE = REPO / "quasched"


def _run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd)


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    return _run(["-c", code], env=env)


@pytest.mark.slow  # a real CLI process
def test_rng_go_works_on_a_fresh_install_without_shared_data(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("QUASCHED_COMPAT_DATA", "QUASCHED_DATA")}
    env.update(QUASCHED_DATA=str(empty), HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    result = _run(["-m", "quasched.cli", "simulate", "--rng", "go", "--trace", "synthetic", "--workers", "1"],
                  env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rng go" in result.stdout


def test_packaged_table_equals_the_shared_table(compat_dir):
    shared_table = compat_dir / COOKED_FILE
    packaged = resources.files("quasched.model") / "data" / COOKED_FILE
    assert packaged.read_text() == shared_table.read_text()
    assert (resources.files("quasched.model") / "data" / "LICENSE-go-rngCooked.txt").is_file()
    assert load_cooked() == load_cooked(compat_dir)


@pytest.mark.slow  # a fresh interpreter per module
@pytest.mark.parametrize("module", ["quasched.report.plots", "quasched.report.replay", "quasched.optimize.plots"])
def test_importing_plot_modules_leaves_the_matplotlib_backend_alone(module):
    result = _python(
        "import sys, matplotlib\n"
        "raw = dict.__getitem__(matplotlib.rcParams, 'backend')\n"
        "matplotlib.use('svg')\n"
        "before = matplotlib.get_backend()\n"
        f"import {module}\n"
        "assert matplotlib.get_backend() == before == 'svg', matplotlib.get_backend()\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    assert result.returncode == 0, result.stderr


def test_cli_imports_no_heavy_module():
    heavy = ("numpy", "pandas", "matplotlib", "scipy", "highspy", "dimod", "qiskit")
    result = _python(f"import sys, quasched.cli\nprint([m for m in {heavy!r} if m in sys.modules])")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _compat_imports(path: Path) -> list[tuple[int, bool]]:
    """``(line, at module level)`` of every import of ``quasched.compat`` in a source file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(n == "quasched.compat" or n.startswith("quasched.compat.") for n in names):
            found.append((node.lineno, id(node) in top))
    return found


def test_model_policies_and_metrics_never_import_compat():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for folder in ("model", "policies", "metrics")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for line, _ in _compat_imports(path)
    ]
    assert offenders == []


@pytest.mark.parametrize("module", ["sim/arrival.py", *sorted(f"cli/{p.name}" for p in (PACKAGE / "cli").glob("*.py"))])
def test_arrival_and_cli_import_compat_only_lazily(module):
    assert not [line for line, top in _compat_imports(PACKAGE / module) if top]
