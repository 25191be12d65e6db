"""Command line: default run, outputs, and clean errors (never a traceback)."""

from __future__ import annotations

import csv

import pytest
from typer.testing import CliRunner

from quasched.cli import app
from quasched.cli.common import parse_seeds

runner = CliRunner()


def test_parse_seeds_forms():
    assert parse_seeds("42") == [42]
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("1,5-6") == [1, 5, 6]


def test_default_simulate_needs_no_data_and_writes_outputs(tmp_path):
    result = runner.invoke(app, ["simulate", "--policy", "fgd,bestfit", "--rng", "native",
                                 "--workers", "1", "--out", str(tmp_path), "--events"])
    assert result.exit_code == 0, result.output
    assert "│ FGD " in result.output and "│ BestFit " in result.output and "06-FGD" not in result.output
    for name in ("analysis_allo_discrete.csv", "analysis_frag_ratio_discrete.csv",
                 "analysis_frag_discrete.csv", "failed_pods.csv", "summary.csv", "alloc.png",
                 "events/FGD_42.csv"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = list(csv.reader((tmp_path / "analysis_allo_discrete.csv").open()))
    assert rows[0][:5] == ["workload", "sc_policy", "tune", "seed", "total_gpus"] and len(rows[0]) == 5 + 131
    assert [r[1] for r in rows[1:]] == ["06-FGD", "05-BestFit"]


def test_missing_trace_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("QUASCHED_DATA", raising=False)
    monkeypatch.setattr("quasched.traces.datadir.fetch", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    result = runner.invoke(app, ["simulate", "--trace", "openb-default", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "not found" in result.output and "--data-dir" in result.output
    assert "Traceback" not in result.output


def test_malformed_trace_names_file_line_and_field(tmp_path, data_dir):
    folder = tmp_path / "alibaba-gpu-v2023"
    folder.mkdir()
    (folder / "openb_node_list_gpu_node.csv").write_text(
        (data_dir / "alibaba-gpu-v2023" / "openb_node_list_gpu_node.csv").read_text())
    (folder / "openb_pod_list_default.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_model\np1,1000,10,1,500,\np2,12x,10,0,0,\n")
    result = runner.invoke(app, ["simulate", "--trace", "openb-default", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "openb_pod_list_default.csv line 3, field 'cpu_milli'" in result.output
    assert "Traceback" not in result.output


def test_unknown_policy_and_trace_are_rejected():
    result = runner.invoke(app, ["simulate", "--policy", "nope"])
    assert result.exit_code == 2 and "unknown policy 'nope'; choose from" in result.output
    result = runner.invoke(app, ["simulate", "--trace", "nope"])
    assert result.exit_code == 2 and "nope: unknown trace; known: synthetic" in result.output


def test_traces_list_names_every_family():
    result = runner.invoke(app, ["traces", "list"])
    assert result.exit_code == 0
    assert {"synthetic", "openb-default", "openb-multigpu50", "dlrm-2025"} <= set(result.output.split())


def test_default_replay_needs_no_data_and_writes_outputs(tmp_path):
    result = runner.invoke(app, ["replay", "--policy", "fgd", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "│ FGD " in result.output and "06-FGD" not in result.output
    for name in ("summary.csv", "events_FGD_42.csv", "pods_FGD_42.csv", "replay.png"):
        assert (tmp_path / name).stat().st_size > 0, name


def test_policies_lists_every_policy_with_purpose_and_typed_parameters():
    from quasched.policies.registry import REGISTRY

    result = runner.invoke(app, ["policies"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    listing = " ".join(result.output.replace("│", " ").split())  # rich folds long cells over lines
    for info in REGISTRY.entries():
        assert f" {info.name} {info.purpose.split()[0]}" in listing, info.name
        for param in info.params:
            assert f"{param.name}: {param.kind.__name__} = {param.default!r}" in listing, (info.name, param.name)
    assert "ours" not in listing.lower().replace("hours", "")


@pytest.mark.parametrize("command", ["serve", "simulate", "replay", "sweep"])
def test_help_points_to_the_policy_list_and_fits_a_screen(command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    assert "`quasched policies` lists them" in text and "CCGrid" not in text  # no policy is described here
    assert len(result.output.splitlines()) <= 60
