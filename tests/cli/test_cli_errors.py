"""Bad command-line input: each error names the option (or file, row and field) and the fix, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quasched.cli import app
from quasched.cli.batch import parse_machines
from quasched.cli.common import parse_seeds
from quasched.traces.datadir import cache_dir, search_dirs
from quasched.traces.errors import TraceError

runner = CliRunner()


def invoke(*args: str) -> str:
    """Output of a command that must fail cleanly (exit 2, no traceback), whitespace and frames folded."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return re.sub(r"[\s│╭╮╰╯─]+", " ", result.output)


@pytest.mark.parametrize(("seeds", "says"), [
    ("abc", "'abc' is not a seed: write 42, 42-51 or 42,45,50"),
    ("5-1", "empty range '5-1': write the low seed first (1-5)"),
    ("1,x-3", "'x-3' is not a seed"),
    (",", "no seeds in ','"),
    ("1-1000000000", "'1-1000000000': more than 100,000 seeds in all"),
    ("1-60000,1-40001", "'1-40001': more than 100,000 seeds in all"),
])
def test_bad_seeds_name_the_option_and_the_form(seeds, says):
    for command in ("simulate", "replay", "sweep"):
        assert f"--seeds: {says}" in invoke(command, "--seeds", seeds)


def test_seed_ranges_and_negative_seeds():
    assert parse_seeds("3-5, 9") == [3, 4, 5, 9]
    assert parse_seeds("-2--1,-7", "go") == [-2, -1, -7]
    assert parse_seeds("4-4") == [4]


@pytest.mark.parametrize("args, says", [
    (("simulate", "--seeds", "3,-1"), "Invalid value for --seeds: -1 is negative: the native random stream takes seeds "
                                      "from 0 (--rng go takes any)"),  # was a ValueError traceback
    (("replay", "--seeds", "-2--1"), "Invalid value for --seeds: -2 is negative"),
    (("sweep", "--rng", "native", "--seeds", "-1"), "Invalid value for --seeds: -1 is negative"),
    (("federation", "--seeds", "-1"), "Invalid value for --seeds: -1 is negative"),
    (("replay", "--failure-rate", "1e-3", "--failure-seed", "-1"), "Invalid value for --failure-seed: -1 is negative"),
    (("serve", "--clock", "virtual", "--seed", "-1"), "Invalid value for --seed: -1 is negative"),
    (("batch", "--seed", "-1"), "Invalid value for '--seed': Input should be greater than or equal to 0"),  # traceback
])
def test_a_negative_seed_of_the_native_stream_is_named(args, says):
    assert says in invoke(*args)


@pytest.mark.parametrize(("spec", "says"), [
    ("fgd:beta=x", "--policy: policy fgd: bad parameter 'beta=x' (parameters: scale)"),
    ("guard:nosuch=1", "--policy: policy guard: bad parameter 'nosuch=1' (parameters: beta, gamma, delta)"),
    ("guard:beta=-1", "--policy: policy guard: parameter beta='-1' must be at least 0"),
    ("power:beta=two", "policy power: parameter beta='two' is not a float"),
    ("health:weight=nan", "policy health: parameter weight='nan' must be a finite number"),
    ("guard:delta=inf", "policy guard: parameter delta='inf' must be a finite number"),
    ("nosuch", "--policy: unknown policy 'nosuch'; choose from random,"),
])
def test_bad_policy_specs_name_the_policy_and_parameter(spec, says):
    assert says in invoke("simulate", "--policy", spec)


@pytest.mark.parametrize("args", [
    ("simulate", "--tune", "-1"), ("simulate", "--workers", "-1"), ("sweep", "--workers", "-2"),
    ("replay", "--headroom", "0"), ("replay", "--pue", "0.5"), ("batch", "--time-limit", "-1"),
    ("batch", "--heavy", "1.5"), ("batch", "--alpha", "inf"), ("batch", "--alpha", "1.5"),
    ("replay", "--departure", "never"), ("replay", "--missing-creation", "drop"),
    ("serve", "--order", "lifo"), ("serve", "--batch-solver", "cplex"), ("serve", "--grace", "-1"),
    ("serve", "--decay-alpha", "2"), ("serve", "--port", "0"), ("serve", "--grace", "inf"),
    ("serve", "--gpu-hot", "200"), ("serve", "--gpu-hot", "10"),
])
def test_out_of_range_options_are_rejected_by_name(args):
    assert f"Invalid value for '{args[1]}'" in invoke(*args)


@pytest.mark.parametrize("args", [("simulate", "--tune"), ("sweep", "--tune"), ("replay", "--headroom"),
                                  ("replay", "--pue")])  # --pue inf gave inf kWh
def test_an_infinite_multiple_is_refused_not_run_forever(args):
    assert f"'{args[1]}': inf is not a finite number; write a multiple such as 1.3" in invoke(*args, "inf")


@pytest.mark.parametrize("args", [("simulate", "--tune"), ("sweep", "--tune"), ("replay", "--headroom")])
def test_a_huge_multiple_is_refused_not_run_until_memory_runs_out(args):
    assert f"'{args[1]}': 1e+12 is above 100; write a multiple such as 1.3" in invoke(*args, "1e12")


@pytest.mark.parametrize(("days", "says"), [("inf", "inf is not a finite number; write a number of days such as 7"),
                                            ("nan", "Input should be greater than or equal to 0.1"),
                                            ("0", "Input should be greater than or equal to 0.1")])
def test_federation_days_must_be_finite_and_positive(days, says):
    assert f"Invalid value for '--days': {says}" in invoke("federation", "--days", days)


@pytest.mark.parametrize(("args", "says"), [
    (("--failure-rate", "-1"), "--failure-rate -1.0 must be at least 0"),
    (("--failure-rate", "1e-3", "--checkpoint-min", "0"), "--checkpoint-min 0.0 must be positive"),
    (("--failure-rate", "1e-3", "--flaky-share", "2"), "--flaky-share 2.0 must be within 0..1"),
    (("--carbon-zone", "DE-LU", "--carbon-start", "noon"), "--carbon-start 'noon' is not a UTC time"),
    (("--carbon-zone", "DE-LU", "--carbon-start", "NaT"), "--carbon-start 'NaT' is not a UTC time"),
    (("--carbon-zone", "DE-LU", "--carbon-start", "2023-06-01T00:00+05:00"),
     "--carbon-start '2023-06-01T00:00+05:00' is not a UTC time; write e.g. 2023-06-01T00:00, without a time zone"),
    (("--failure-rate", "inf"), "--failure-rate inf must be a finite number"),
    (("--failure-rate", "1e-3", "--checkpoint-min", "inf"), "--checkpoint-min inf must be a finite number"),
    (("--failure-rate", "1e-3", "--restart-min", "inf"), "--restart-min inf must be a finite number"),
    (("--failure-rate", "1e-3", "--false-warnings", "inf"), "--false-warnings inf must be a finite number"),
    (("--failure-rate", "1e-3", "--flaky-factor", "nan"), "--flaky-factor nan must be at least 1"),
    (("--failure-rate", "1e-3", "--flaky-factor", "inf"), "--flaky-factor inf must be a finite number"),
])
def test_replay_model_options_are_named_in_errors(args, says):
    assert says in invoke("replay", *args)


def test_unreadable_carbon_dir_names_the_file_and_the_fix(tmp_path):
    text = invoke("replay", "--carbon-zone", "DE-LU", "--carbon-dir", str(tmp_path / "none"))
    assert "carbon_intensity_2023_hourly.csv" in text and "pass --carbon-dir DIR or set QUASCHED_CARBON" in text


def test_a_sweep_of_no_traces_is_named(tmp_path):
    text = invoke("sweep", "--traces", " , ", "--store", str(tmp_path / "s.sqlite"))
    assert "Invalid value for --traces: no traces in ' , ': write openb-default,openb-gpushare40 or 'paper'" in text
    assert not (tmp_path / "s.sqlite").exists()


def test_bad_trace_name_in_sweep_lists_the_known_ones(tmp_path):
    text = invoke("sweep", "--traces", "openb-default,openb-nosuch", "--store", str(tmp_path / "s.sqlite"))
    assert "openb-nosuch: unknown trace; known: synthetic, openb-default" in text
    assert not (tmp_path / "s.sqlite").exists()


def test_workload_file_errors_name_file_line_and_field(tmp_path):
    rows = ["name,cpu,memory,gpu"] + [f"p{i},4,16Gi,1" for i in range(5)] + ["p5,4,16Gi,lots"]
    (tmp_path / "w.csv").write_text("\n".join(rows) + "\n")
    text = invoke("simulate", "--workload", str(tmp_path / "w.csv"))
    assert "w.csv line 7, field 'gpu': 'lots'" in text
    missing = tmp_path / "missing.csv"
    assert f"error: file '{missing}' not found" in invoke("simulate", "--workload", str(missing))


@pytest.mark.parametrize(("args", "says"), [
    (("--solvers", "nope"), "Invalid value for --solvers: unknown solver ['nope']; choose from greedy-qua,"),
    (("--instances", ","), "Invalid value for --instances: no instance given; choose from qua-greedy, qua-qubo"),
])
def test_batch_lists_name_their_option(args, says):  # was "Invalid value: unknown instance []"
    assert says in invoke("batch", *args)


@pytest.mark.parametrize(("text", "counts"), [("10:30:10", [10, 20, 30]), ("5", [5]), ("3,1", [3, 1]),
                                                ("9998:10000:2", [9998, 10000])])
def test_machine_lists(text, counts):
    assert parse_machines(text) == counts


def test_an_unusable_sweep_store_is_named_not_a_traceback(tmp_path):
    (tmp_path / "notes.sqlite").write_text("not a database")
    for store, says in [(tmp_path / "notes.sqlite", "file is not a database"),
                        (tmp_path / "file" / "x.sqlite", "")]:
        (tmp_path / "file").write_text("a file where the folder should be")
        out = invoke("sweep", "--traces", "synthetic", "--policy", "fgd", "--seeds", "1", "--store", str(store))
        assert f"--store {store}: cannot open it as a results store" in out and says in out


@pytest.mark.parametrize(("machines", "says"), [
    ("10:5:1", "'10:5:1' gives no machine counts: every count must be 1 to 10,000"),
    ("0,10", "'0,10' gives 0..10"), ("10:20:0", "bad machine list '10:20:0'"),
    ("1:1000000000000:1", "'1:1000000000000:1' gives 1..1000000000000: every count must be 1 to 10,000"),  # was a hang
])
def test_bad_machine_lists(machines, says):
    assert f"--machines: {says}" in invoke("batch", "--machines", machines)


def test_help_keeps_bracketed_text():
    """Rich markup would swallow ``[ray]``."""
    assert "pip install 'quasched[ray]'" in invoke_help("sweep")


def invoke_help(command: str) -> str:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    return re.sub(r"[\s│]+", " ", result.output)


@pytest.mark.parametrize("command", ["simulate", "replay", "sweep", "batch", "federation"])
def test_unwritable_out_fails_before_any_run(tmp_path, command):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"  # below a regular file: cannot be created
    extra = ["--store", str(tmp_path / "s.sqlite"), "--traces", "synthetic"] if command == "sweep" else []
    text = invoke(command, "--out", str(out), *extra)
    assert f"{out}" in text and "cannot create" in text and "Not a directory" in text
    assert not (tmp_path / "s.sqlite").exists()


def test_events_need_out():
    assert "--events: the per-event CSVs go into --out: pass --out DIR too" in invoke("simulate", "--events")


def test_malformed_go_table_names_file_and_line(tmp_path):
    from quasched.model.gorand import COOKED_FILE

    (tmp_path / COOKED_FILE).write_text("1\n2\nthree\n")
    text = invoke("simulate", "--rng", "go", "--compat-data", str(tmp_path))
    assert f"{tmp_path / COOKED_FILE} line 3: 'three' is not an integer" in text
    (tmp_path / COOKED_FILE).write_text("1\n2\n")
    assert "expected 607 constants, found 2" in invoke("simulate", "--rng", "go", "--compat-data", str(tmp_path))


def test_command_list_shows_each_summary_unbroken():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "400"})
    lines = [line for line in result.output.splitlines() if "│ simulate " in line]
    assert len(lines) == 1 and "are tuned to --tune × GPU capacity, never depart; report GPU allocation" in lines[0]


@pytest.mark.parametrize("option", ["--cluster", "--workload"])
def test_a_folder_for_a_file_is_named_as_one(tmp_path, option):
    assert f"file '{tmp_path}' not found. Looked in: - {tmp_path} Fix: it is a folder: pass the file inside it." in \
        invoke("simulate", option, str(tmp_path))


def test_failure_options_without_failures_are_an_error():
    text = invoke("replay", "--drain-errors", "1", "--migrate", "device")
    assert "--drain-errors, --migrate act on GPU failures, which are off: pass --failure-rate too" in text
    explicit = runner.invoke(app, ["replay", "--failure-rate", "0", "--drain-errors", "1"])
    assert explicit.exit_code == 0, explicit.output  # an explicit rate 0 (a baseline run) keeps the options quiet


@pytest.mark.parametrize("option, says", [
    (("--policy", "nosuch"), "--policy"),
    (("--slack", "24,4"), "0 <= LO <= HI"),
    (("--slack", "-1,4"), "0 <= LO <= HI"),
    (("--slack", "1,inf"), "slack range '1,inf' needs finite 0 <= LO <= HI"),
    (("--zones", " , "), "Invalid value for --zones: ' , ' needs distinct zones, e.g. DE-LU,GB, or 'all'"),
    (("--zones", "DE-LU,GB,DE-LU"), "'DE-LU,GB,DE-LU' needs distinct zones"),  # was two clusters in one zone
    (("--capacity", "inf"), "Invalid value for '--capacity': inf is not a finite number; write a multiple such as 1.5"),
    (("--seeds", "5-1"), "--seeds"),
])
def test_federation_rejects_bad_options_before_loading_any_data(tmp_path, option, says):
    # the data dirs do not exist: the option must be named before anything is read
    out = invoke("federation", "--data-dir", str(tmp_path / "none"), "--carbon-dir", str(tmp_path / "none"), *option)
    assert says in out and "Traceback" not in out


@pytest.mark.parametrize("args, says", [
    (("submit", "--team", "t", "--name", "j", "--gpus", "nan"),
     "Invalid value for '--gpus': nan is not a finite number"),
    (("submit", "--team", "t", "--name", "j", "--cpu", "inf"), "Invalid value for '--cpu': inf is not a finite number"),
    (("queue", "t", "--weight", "nan"), "Invalid value for '--weight': nan is not a finite number"),
    (("queue", "t", "--borrowing-limit", "inf"), "Invalid value for '--borrowing-limit': inf is not a finite number"),
    (("queue", "t", "--quota", "A100=nan"), "--quota 'A100=nan': write MODEL=GPUS, e.g. A100=8 or '*=4'"),
])
def test_client_numbers_that_json_cannot_hold_are_named_before_any_request(args, says):
    # the server address is never reached: the option must be named first (was a 'not JSON compliant' traceback)
    assert says in invoke(*args, "--server", "http://127.0.0.1:1")


@pytest.mark.parametrize("policy", ["fgd,bestfit", "all"])
def test_serve_takes_one_policy_with_either_clock(policy):
    for clock in ("wall", "virtual"):  # the virtual clock took the first one silently
        assert "Invalid value for --policy: give one policy" in invoke("serve", "--clock", clock, "--policy", policy)


@pytest.mark.parametrize("where", ["option", "file"])
def test_a_token_no_header_can_carry_is_named_not_a_traceback(tmp_path, monkeypatch, where):
    # was a UnicodeEncodeError traceback from the HTTP client
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QUASCHED_TOKEN", raising=False)
    args = ["jobs", "--server", "http://127.0.0.1:1"]
    if where == "option":
        args += ["--token", "tok\u00e9n"]
    else:
        (tmp_path / "quasched.token").write_text("tok\u00e9n\n")
    origin = "--token or $QUASCHED_TOKEN" if where == "option" else "the file quasched.token"
    assert f"the API token from {origin} is not printable ASCII" in invoke(*args)


@pytest.mark.parametrize("command", [("simulate", "--trace", "openb-default"), ("replay", "--trace", "dlrm-2025"),
                                     ("batch", "--machines", "10"), ("traces", "show", "openb-default")])
def test_a_data_dir_that_is_no_folder_is_named(tmp_path, command):
    # a typo fell through to $QUASCHED_DATA or the cache without a word (batch: a TraceError traceback)
    typo = tmp_path / "tarces"
    assert f"error: tarces: --data-dir {typo} is not a folder; pass the folder that holds alibaba-gpu-v2023/" in (
        invoke(*command, "--data-dir", str(typo)))


def test_a_stale_data_variable_behind_a_good_data_dir_is_skipped(monkeypatch, tmp_path, data_dir):
    """Only the first folder given must exist: a stale ``$QUASCHED_DATA`` does not break ``--data-dir``."""
    monkeypatch.setenv("QUASCHED_DATA", str(tmp_path / "gone"))
    assert search_dirs(data_dir)[:2] == [("--data-dir", Path(data_dir)), ("user cache", cache_dir())]
    with pytest.raises(TraceError, match=r"QUASCHED_DATA .*gone is not a folder"):
        search_dirs()


def test_batch_names_a_malformed_trace_file(tmp_path):
    folder = tmp_path / "alibaba-gpu-v2025"
    folder.mkdir()
    (folder / "disaggregated_DLRM_trace.csv").write_text("instance_sn,role\ni0,HN\n")
    assert "error: disaggregated_DLRM_trace.csv line 1, field 'app_name': required column is missing" in (
        invoke("batch", "--machines", "10", "--data-dir", str(tmp_path)))
