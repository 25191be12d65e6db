"""``quasched batch`` end to end on small machine counts."""

import csv
import importlib.metadata
import json

import pytest
import typer
from extra import requires
from typer.testing import CliRunner

from quasched.cli.batch import batch, parse_machines

app = typer.Typer()
app.command()(batch)


def test_help_names_match_the_registries():
    from quasched.cli.batch import INSTANCE_NAMES, SOLVER_NAMES
    from quasched.optimize.instances import INSTANCES
    from quasched.optimize.solvers import SOLVERS

    assert INSTANCE_NAMES == INSTANCES and SOLVER_NAMES == tuple(SOLVERS)


def test_parse_machines():
    assert parse_machines("10:30:10") == [10, 20, 30]
    assert parse_machines("5,7") == [5, 7]


@pytest.mark.slow  # solves every instance
def test_batch_writes_verified_results_and_plots(data_dir, tmp_path):
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "--machines", "10", "--solvers",
                                      "greedy-qua,greedy,milp", "--rules", "qua", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert len(rows) == 6 and all(r["verified"] == "True" for r in rows)
    assert {r["highspy"] for r in rows} == {importlib.metadata.version("highspy")}  # proof times depend on it
    greedy_qua = next(r for r in rows if r["instance"] == "qua-greedy" and r["solver"] == "greedy-qua")
    assert (greedy_qua["jobs"], greedy_qua["apps"]) == ("67", "5")
    assert (tmp_path / "qua-greedy-jobs.png").stat().st_size > 0
    assert (tmp_path / "qua-qubo-apps.png").stat().st_size > 0


@requires("dimod", "quantum")
def test_batch_no_polish_keeps_raw_qubo_samples(data_dir, tmp_path):
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "--instances", "qua-qubo", "--machines", "10",
                                      "--solvers", "qubo-sa", "--no-polish", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "results.csv") as handle:
        (row,) = csv.DictReader(handle)
    info = json.loads(row["info"])
    assert row["verified"] == "True" and info["polish"] is False and info["samples_changed_by_polish"] == 0
