"""openb loaders on small hand-written files: conversion rules and error reports."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from quasched.traces import TraceError, TraceNotFound, load_openb_nodes, load_openb_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
PODS = [
    "p0,12000,16384,1,1000,,LS,Running,0,12537496,0",
    "p1,6000,12288,1,460,V100M16|V100M32|V100M32,BE,Failed,427061,,",
    "p2,8000,0,0,500,,Burstable,Pending,,,",
    "p3,88000,327680,8,1000,G2,Guaranteed,Running,10.5,20,10",
]
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
NODES = ["n0,64000,262144,2,P100", "n1,32000,262144,0,", "n2,96000,393216,8,G2"]


def write(tmp_path: Path, lines: list[str], name: str = "openb_pod_list_x.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def pods(tmp_path: Path, *rows: str, header: str = POD_HEADER) -> Path:
    return write(tmp_path, [header, *rows])


def test_conversion_rules(tmp_path) -> None:
    rows = [*PODS, "p4,1000,10,1,1500,A10||T4|,LS,Running,,,", "p5,1000,10,1,-3,,LS,Running,,,",
            "p6,1000,10,0,0,G2,LS,Running,,,", "p7,1000,10,1,100,V100M16||,LS,Running,,,"]
    w = load_openb_pods(pods(tmp_path, *rows))
    assert list(w.name) == [f"p{i}" for i in range(8)] and w.name.dtype == object
    assert list(w.gpu_milli) == [1000, 460, 0, 1000, 1000, 0, 0, 100]  # clamped; num_gpu 0 drops it
    assert list(w.num_gpu) == [1, 1, 0, 8, 1, 1, 0, 1]
    # empty tokens dropped, duplicates kept, CPU-only pods lose their constraint
    assert list(w.gpu_model) == ["", "V100M16|V100M32|V100M32", "", "G2", "A10|T4", "", "", "V100M16"]
    assert list(w.qos[:4]) == ["LS", "BE", "Burstable", "Guaranteed"]
    assert (w.creation_time[0], w.creation_time[1], w.creation_time[3]) == (0.0, 427061.0, 10.5)
    assert math.isnan(w.creation_time[2]) and math.isnan(w.deletion_time[1]) and w.deletion_time[3] == 20.0
    assert list(w.memory_mib[:3]) == [16384, 12288, 0]
    assert w.source == "openb_pod_list_x.csv"


def test_multigpu_format_without_the_gpu_spec_column(tmp_path) -> None:
    w = load_openb_pods(pods(tmp_path, "a,1000,1,2,1000", "b,1000,1,1,300",
                             header="name,cpu_milli,memory_mib,num_gpu,gpu_milli"))
    assert list(w.gpu_model) == ["", ""] and list(w.qos) == ["", ""]
    assert np.isnan(w.creation_time).all() and list(w.gpu_request) == [2000, 300]


def test_blank_lines_are_skipped_and_lines_still_counted(tmp_path) -> None:
    path = write(tmp_path, [POD_HEADER, PODS[0], "", PODS[1], "p9,x,1,0,0,,LS,,,,"])
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert (err.value.row, err.value.field) == (5, "cpu_milli")


def test_nodes(tmp_path) -> None:
    nodes = load_openb_nodes(write(tmp_path, [NODE_HEADER, *NODES], "nodes.csv"))
    assert list(nodes.gpu_model) == ["P100", "", "G2"] and nodes.gpu_model.dtype == object
    assert list(nodes.num_gpus) == [2, 0, 8] and nodes.total_gpus == 10
    assert list(nodes.cpu_milli) == [64000, 32000, 96000]


@pytest.mark.parametrize(
    ("bad_row", "line", "field", "text"),
    [
        ("q,abc,1,0,0,,LS,,,,", 3, "cpu_milli", "'abc' is not a number"),
        ("q,1000,-5,0,0,,LS,,,,", 3, "memory_mib", "'-5' must not be negative"),
        ("q,1000,1,1.5,1000,,LS,,,,", 3, "num_gpu", "'1.5' is not an integer"),
        ("q,1000,1,1,500,V100 M16,LS,,,,", 3, "gpu_spec", "'V100 M16' is not a list of GPU model names"),
        ("q,1000,1,1,500,|-x,LS,,,,", 3, "gpu_spec", "'|-x' is not"),
        ("q,1000,1,2,500,,LS,,,,", 3, "gpu_milli", "'500' is unsupported"),
        ("q,,1,0,0,,LS,,,,", 3, "cpu_milli", "value is missing"),
        ("q,1000,1,0,0,,Gold,,,,", 3, "qos", "'Gold' is not one of"),
        ("q,1000,1,0,0,,LS,,soon,,", 3, "creation_time", "'soon' is not a number"),
        ("q,1e30,1,0,0,,LS,,,,", 3, "cpu_milli", "'1e30' is out of range"),
        ("p0,1000,1,0,0,,LS,,,,", 3, "name", "'p0' already used on line 2"),
        (",1000,1,0,0,,LS,,,,", 3, "name", "value is missing"),
        ("q,1000,1,0,0,,LS,,20,10,", 3, "deletion_time", "10 is before creation_time 20; a pod cannot end before"),
    ],
)
def test_bad_value_is_reported_with_line_and_field(tmp_path, bad_row, line, field, text) -> None:
    path = pods(tmp_path, PODS[0], bad_row, PODS[1].replace("p1", "later"))
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert (err.value.row, err.value.field) == (line, field)
    assert text in err.value.message
    assert str(err.value).startswith(f"openb_pod_list_x.csv line {line}, field '{field}': ")


def test_error_message_format(tmp_path) -> None:
    rows = [f"p{i},1000,1,0,0,,LS,,,," for i in range(15)] + ["bad,abc,1,0,0,,LS,,,,"]
    with pytest.raises(TraceError) as err:
        load_openb_pods(pods(tmp_path, *rows))
    assert str(err.value) == "openb_pod_list_x.csv line 17, field 'cpu_milli': 'abc' is not a number"
    assert isinstance(err.value, ValueError) and err.value.file.endswith("openb_pod_list_x.csv")


def test_first_bad_value_in_file_order_wins(tmp_path) -> None:
    path = pods(tmp_path, "a,1000,1,0,0,,Gold,,,,", "b,abc,1,0,0,,LS,,,,")
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert (err.value.row, err.value.field) == (2, "qos")


@pytest.mark.parametrize(
    ("lines", "row", "field", "text"),
    [
        (["name,cpu_milli,memory_mib,num_gpu", "a,1,1,0"], 1, "gpu_milli", "required column is missing"),
        (["name,cpu_milli,cpu_milli,memory_mib,num_gpu,gpu_milli"], 1, "cpu_milli", "duplicate column"),
        ([POD_HEADER], None, None, "no data rows"),
        ([POD_HEADER, ""], None, None, "no data rows"),
        ([POD_HEADER, PODS[0], PODS[1] + ",extra"], 3, None, "malformed CSV: 12 fields, the header has 11"),
        ([POD_HEADER, PODS[0], 'b,"1000,1'], 3, None, "a quoted field is never closed"),
        ([POD_HEADER, PODS[0], "p9,6000,12288,1,460,V100M16,BE", PODS[1]], 3, "pod_phase",
         "malformed CSV: 7 fields, the header has 11 (a cut line?)"),  # was padded with empty cells, silently
        ([POD_HEADER, PODS[0], "", "p1,6000,1228"], 4, "num_gpu", "malformed CSV: 3 fields, the header has 11"),
    ],
)
def test_bad_file_structure(tmp_path, lines, row, field, text) -> None:
    with pytest.raises(TraceError) as err:
        load_openb_pods(write(tmp_path, lines))
    assert (err.value.row, err.value.field) == (row, field)
    assert text in str(err.value)


def test_empty_and_missing_files(tmp_path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(TraceError, match="empty.csv: the file is empty"):
        load_openb_pods(empty)
    with pytest.raises(TraceNotFound, match="nope.csv"):
        load_openb_pods(tmp_path / "nope.csv")


@pytest.mark.parametrize(
    ("row", "field", "text"),
    [
        ("n3,8000,1,2,", "model", "value is missing (the node has GPUs)"),
        ("n3,8000,1,2,P100|T4", "model", "is not a GPU model name"),
        ("n3,8000,1,-2,T4", "gpu", "must not be negative"),
        ("n0,8000,1,2,T4", "sn", "already used on line 2"),
        ("n3,8000,1,1000000000,T4", "gpu", "'1000000000' is above 64"),  # was a nodes x GPUs matrix of 8 GB
    ],
)
def test_bad_node_rows(tmp_path, row, field, text) -> None:
    with pytest.raises(TraceError) as err:
        load_openb_nodes(write(tmp_path, [NODE_HEADER, *NODES, row], "nodes.csv"))
    assert (err.value.row, err.value.field) == (5, field) and text in err.value.message


CELL_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, len(PODS)), column=st.integers(0, 10), text=CELL_TEXT)
def test_fuzzed_cell_loads_or_raises_trace_error(tmp_path, row, column, text) -> None:
    lines = [POD_HEADER, *PODS]
    cells = lines[row].split(",")
    cells[column] = text
    lines[row] = ",".join(cells)
    path = tmp_path / "fuzz.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        w = load_openb_pods(path)
    except TraceError as err:
        assert err.file == str(path) and err.message
        return
    assert len(w) >= 1 and np.all((w.gpu_milli >= 0) & (w.gpu_milli <= 1000))
    assert np.all(w.cpu_milli >= 0) and np.all(w.memory_mib >= 0)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, len(NODES)), column=st.integers(0, 4), text=CELL_TEXT)
def test_fuzzed_node_cell_loads_or_raises_trace_error(tmp_path, row, column, text) -> None:
    lines = [NODE_HEADER, *NODES]
    cells = lines[row].split(",")
    cells[column] = text
    lines[row] = ",".join(cells)
    path = write(tmp_path, lines, "nodes.csv")
    try:
        nodes = load_openb_nodes(path)
    except TraceError:
        return
    assert np.all(nodes.num_gpus >= 0)
