"""``quasched batch`` on the core install: the default solvers are those installed, an explicit one that is not is a
clear error naming the ``pip install`` before anything is loaded or solved."""

from __future__ import annotations

import csv
import sys

import pytest
from typer.testing import CliRunner

from quasched.cli import app

QUANTUM_MODULES = ("dimod", "dwave", "dwave.samplers", "qiskit", "qiskit_aer")


@pytest.fixture
def no_quantum(monkeypatch):
    """The ``quantum`` extra uninstalled: importing any of its modules raises ImportError."""
    for module in QUANTUM_MODULES:
        monkeypatch.setitem(sys.modules, module, None)


def test_default_solvers_skip_qubo_without_the_quantum_extra_and_say_so(no_quantum, data_dir, tmp_path):
    result = CliRunner().invoke(app, ["batch", "--data-dir", str(data_dir), "--instances", "qua-greedy",
                                      "--machines", "2", "--time-limit", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "skipping qubo-sa" in result.output and "pip install 'quasched[quantum]'" in result.output
    with open(tmp_path / "results.csv") as handle:
        assert [r["solver"] for r in csv.DictReader(handle)] == ["greedy-qua", "greedy", "milp"]


def test_explicit_qubo_without_the_quantum_extra_fails_before_loading_the_trace(no_quantum, tmp_path):
    result = CliRunner().invoke(app, ["batch", "--data-dir", str(tmp_path / "no-traces-here"), "--machines", "2",
                                      "--solvers", "greedy,qubo-sa"])
    assert result.exit_code == 2
    assert result.output.startswith("error:") and "pip install 'quasched[quantum]'" in result.output
    assert "Traceback" not in result.output and "trace" not in result.output.split("pip install")[1]


def test_default_solvers_with_the_quantum_extra_include_qubo():
    pytest.importorskip("dimod")
    from quasched.cli.batch import installed_solvers

    assert installed_solvers(None) == ["greedy-qua", "greedy", "milp", "qubo-sa"]
    assert installed_solvers("milp,qubo-sa") == ["milp", "qubo-sa"]
