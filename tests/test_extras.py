"""Optional dependencies: the core installs alone; a use whose extra is missing names the pip install."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quasched.cli import app
from quasched.extras import EXTRAS, MissingExtra, require

PYPROJECT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
#: distributions only a use beyond the core needs
OPTIONAL = ("dimod", "dwave-samplers", "qiskit", "qiskit-aer", "psycopg", "kubernetes", "urllib3", "grpcio",
            "protobuf", "nvidia-ml-py", "gymnasium", "cma", "ray")


def distribution(requirement: str) -> str:
    return requirement.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()


def test_core_dependencies_leave_the_extras_out_and_every_extra_is_declared():
    core = {distribution(r) for r in PYPROJECT["dependencies"]}
    assert not core & set(OPTIONAL)
    extras = PYPROJECT["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    assert all(distribution(r) in OPTIONAL for name in EXTRAS for r in extras[name])
    assert "==" not in " ".join(PYPROJECT["dependencies"] + [r for rs in extras.values() for r in rs])


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dimod", None)  # import dimod raises ImportError
    with pytest.raises(MissingExtra, match=r"needs the Python package 'dimod'.*pip install 'quasched\[quantum\]'"):
        require("dimod", "quantum")
    assert require("numpy", "quantum") is sys.modules["numpy"]


def test_batch_without_the_quantum_extra_is_a_clean_error(monkeypatch, data_dir, tmp_path):
    monkeypatch.setitem(sys.modules, "dimod", None)
    result = CliRunner().invoke(app, ["batch", "--data-dir", str(data_dir), "--instances", "qua-qubo",
                                      "--machines", "10", "--solvers", "qubo-sa", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "error:" in result.output and "pip install 'quasched[quantum]'" in result.output
    assert "Traceback" not in result.output


def test_postgres_without_the_postgres_extra_is_a_clean_error(monkeypatch):
    from quasched.service.store.database import Store

    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingExtra, match=r"pip install 'quasched\[postgres\]'"):
        Store("postgresql+psycopg://user@127.0.0.1:1/quasched")


def test_device_plugin_without_grpc_is_a_clean_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)
    result = CliRunner().invoke(app, ["device-plugin", "--node-name", "n0", "--fake-gpus", "1"])
    assert result.exit_code == 2 and "pip install 'quasched[kube]'" in result.output
    assert "Traceback" not in result.output
