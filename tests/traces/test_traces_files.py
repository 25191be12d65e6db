"""Cluster (YAML) and workload (CSV, JSON Lines) files: conversions, errors, round trip, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from repo import REPO
from typer.testing import CliRunner

from quasched.cli import app
from quasched.model.resources import UNLIMITED
from quasched.traces import TraceError, load_cluster_file, load_inputs, load_workload_file
from quasched.traces.units import parse_cpu, parse_gpu, parse_memory

EXAMPLES = REPO / "examples"
CLUSTER = """\
name: lab
pools:
  - name: big
    count: 2
    cpu: 96
    memory: 768Gi
    gpu: {model: A100, count: 8}
    disk: 2Ti
    labels: {zone: eu-1}
  - name: small
    count: 3
    cpu: "48500m"
    memory: 1024
    gpu:
      model: T4
      count: 4
    rdma: 25
  - name: cpu
    count: 1
    cpu: 0.5
    memory: 512MiB
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def assert_error(err: pytest.ExceptionInfo, file: str, line: int | None, field: str | None, text: str) -> None:
    """The error names the file, line and field, and says ``text``."""
    message = str(err.value)
    assert (err.value.row, err.value.field) == (line, field), message
    assert message.startswith(file) and text in message, message
    if line is not None:
        assert f"line {line}" in message
    if field is not None:
        assert repr(field) in message


# ---------------------------------------------------------------- units
@pytest.mark.parametrize(("text", "milli"), [("4", 4000), ("0.5", 500), ("500m", 500), (96, 96000), ("1.25", 1250)])
def test_cpu_units(text, milli) -> None:
    assert parse_cpu(text) == milli


@pytest.mark.parametrize(("text", "mib"), [
    ("1024", 1024), (512, 512), ("1Gi", 1024), ("1.5GiB", 1536), ("2Ti", 2 * 1024**2),
    ("2048Ki", 2), ("3MiB", 3), ("768Gi", 786432),
])
def test_memory_units(text, mib) -> None:
    assert parse_memory(text) == mib


@pytest.mark.parametrize(("parse", "text", "says"), [
    (parse_cpu, "four", "'four' is not a number"),
    (parse_cpu, "4 cores", "unknown unit 'cores'"),
    (parse_cpu, "4Gi", "unknown unit 'Gi'"),
    (parse_memory, "4GB", "unknown unit 'GB'"),
    (parse_memory, "-1Gi", "must not be negative"),
    (parse_gpu, "1.5", "neither a share of one GPU nor whole GPUs"),
    (parse_gpu, "0.0001", "below 0.001 GPU"),
    (parse_gpu, "0.9999", "rounds to a whole GPU"),
    (parse_gpu, True, "is not a number"),
    (parse_memory, "1e15Ti", "'1e15Ti' is out of range"),  # was -2^63 MiB after the cast, with a warning only
    (parse_cpu, "9e15", "'9e15' is out of range"),
])
def test_unit_errors(parse, text, says) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse(text)


# ---------------------------------------------------------------- cluster file
def test_cluster_file_conversion(tmp_path) -> None:
    nodes = load_cluster_file(write(tmp_path, "c.yaml", CLUSTER))
    assert list(nodes.name) == ["big-0", "big-1", "small-0", "small-1", "small-2", "cpu-0"]
    assert list(nodes.cpu_milli) == [96000] * 2 + [48500] * 3 + [500]
    assert list(nodes.memory_mib) == [786432] * 2 + [1024] * 3 + [512]
    assert list(nodes.num_gpus) == [8, 8, 4, 4, 4, 0] and nodes.total_gpus == 28
    assert list(nodes.gpu_model) == ["A100"] * 2 + ["T4"] * 3 + [""]
    assert list(nodes.rdma) == [100, 100, 25, 25, 25, 100]
    assert list(nodes.disk_mib) == [2 * 1024**2] * 2 + [UNLIMITED] * 4
    assert list(nodes.labels) == [{"zone": "eu-1"}] * 2 + [{}] * 4
    assert nodes.labels[0] is not nodes.labels[1]
    assert nodes.source == "lab"


def test_cluster_without_disk_has_no_disk_column(tmp_path) -> None:
    nodes = load_cluster_file(write(tmp_path, "c.yaml", "pools: [{name: n, count: 1, cpu: 1, memory: 1Gi}]\n"))
    assert nodes.disk_mib is None and nodes.source == "c.yaml"


def replace_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("old", "new", "line", "field", "says"), [
    ("    count: 3\n", "    count: 0\n", 11, "pools[1].count", "1 to 1,000,000"),
    ("    count: 3\n", "    count: 100000000000\n", 11, "pools[1].count",
     "write a whole number of nodes, 1 to 1,000,000"),
    ("    count: 3\n", "    count: many\n", 11, "pools[1].count", "'many' is not allowed"),
    ("      count: 4\n", "      count: 1.5\n", 16, "pools[1].gpu.count", "whole number of GPUs"),
    ("      count: 4\n", "      count: 65\n", 16, "pools[1].gpu.count",
     "65 is not allowed; write a whole number of GPUs, 1 to 64"),
    ("      model: T4\n", "      model: T4 GPU\n", 15, "pools[1].gpu.model", "'T4 GPU' is not a valid name"),
    ("    memory: 1024\n", "    memory: 1024GB\n", 13, "pools[1].memory", "unknown unit 'GB'"),
    ("    memory: 1024\n", "    memory: -1\n", 13, "pools[1].memory", "must not be negative"),
    ("    cpu: 0.5\n", "    cpu: lots\n", 20, "pools[2].cpu", "'lots' is not a number"),
    ("    rdma: 25\n", "    rdma: 250\n", 17, "pools[1].rdma", "0 to 100"),
    ("  - name: cpu\n", "  - name: big\n", 18, "pools[2].name", "'big' already names pools[0]"),
    ("    labels: {zone: eu-1}\n", "    labels: {zone: 1}\n", 9, "pools[0].labels.zone", 'quote it: zone: "1"'),
    ("    disk: 2Ti\n", "    disks: 2Ti\n", 8, "pools[0].disks", "unknown key; allowed keys: name, count"),
    ("    cpu: 0.5\n", "", 18, "pools[2].cpu", "required key is missing"),
    ("name: lab\n", "name: lab\ncolour: red\n", 2, "colour", "unknown key; allowed keys: name, pools"),
    ("    gpu: {model: A100, count: 8}\n", "    gpu: 8\n", 7, "pools[0].gpu", "must be a mapping"),
    ("    count: 2\n", "    count: 2\n    count: 3\n", 5, "pools[0].count", "duplicate key"),
])
def test_cluster_file_errors(tmp_path, old, new, line, field, says) -> None:
    with pytest.raises(TraceError) as err:
        load_cluster_file(write(tmp_path, "bad.yaml", replace_line(CLUSTER, old, new)))
    assert_error(err, "bad.yaml", line, field, says)


@pytest.mark.parametrize(("text", "line", "field", "says"), [
    ("", None, None, "the file is empty"),
    ("pools: []\n", 1, "pools", "non-empty list"),
    ("name: x\n", 1, "pools", "required key is missing"),
    ("- 1\n", 1, None, "must be a mapping"),
    ("pools:\n  - {name: a, count: 1\n", 3, None, "invalid YAML"),
    ("pools: [{name: n, count: 1, cpu: 1, memory: 1Gi, labels: {[a, b]: x}}]\n", 1, "pools[0].labels",
     "a key must be plain text"),
])
def test_cluster_file_structure_errors(tmp_path, text, line, field, says) -> None:
    with pytest.raises(TraceError) as err:
        load_cluster_file(write(tmp_path, "bad.yaml", text))
    assert_error(err, "bad.yaml", line, field, says)


# ---------------------------------------------------------------- workload file
WORKLOAD = """\
name,cpu,memory,gpu,gpu_model,creation_time,deletion_time,duration,team,user,app,max_per_node,priority,rdma,disk
train,16,64Gi,2,A100|H100,10,,3600,nlp,ana,trainer,1,5,50,1Ti
serve,500m,2048,0.25,T4,0,100,,recsys,bo,server,,,,
etl,2.5,1.5Gi,,,,,,,,trainer,,-3,,10Gi
notebook,1,512Mi,0.5,,5,,,,,,,,,
"""


def workload_jsonl(tmp_path: Path, lines: list[dict | str], name: str = "w.jsonl") -> Path:
    return write(tmp_path, name, "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")


def check_hand_computed(w) -> None:
    assert list(w.name) == ["train", "serve", "etl", "notebook"]
    assert list(w.cpu_milli) == [16000, 500, 2500, 1000]
    assert list(w.memory_mib) == [65536, 2048, 1536, 512]
    assert list(w.num_gpu) == [2, 1, 0, 1] and list(w.gpu_milli) == [1000, 250, 0, 500]
    assert list(w.gpu_request) == [2000, 250, 0, 500]
    assert list(w.gpu_model) == ["A100|H100", "T4", "", ""]
    assert w.app_names == ("server", "trainer") and list(w.app) == [1, 0, 1, -1]
    assert list(w.max_per_node) == [1, -1, -1, -1] and list(w.priority) == [5, 0, -3, 0]
    assert list(w.rdma) == [50, 0, 0, 0] and list(w.disk_mib) == [1024**2, 0, 10240, 0]
    assert list(w.team) == ["nlp", "recsys", "", ""] and list(w.user) == ["ana", "bo", "", ""]
    assert list(w.creation_time[[0, 1, 3]]) == [10, 0, 5] and math.isnan(w.creation_time[2])
    assert list(w.deletion_time[:2]) == [3610, 100] and np.isnan(w.deletion_time[2:]).all()


def test_workload_csv_conversion(tmp_path) -> None:
    w = load_workload_file(write(tmp_path, "w.csv", WORKLOAD))
    check_hand_computed(w)
    assert w.source == "w.csv"


def test_workload_jsonl_conversion(tmp_path) -> None:
    path = workload_jsonl(tmp_path, [
        {"name": "train", "cpu": 16, "memory": "64Gi", "gpu": 2, "gpu_model": "A100|H100", "creation_time": 10,
         "duration": 3600, "team": "nlp", "user": "ana", "app": "trainer", "max_per_node": 1, "priority": 5,
         "rdma": 50, "disk": "1Ti"},
        "",
        {"name": "serve", "cpu": "500m", "memory": 2048, "gpu": 0.25, "gpu_model": "T4", "creation_time": 0,
         "deletion_time": 100, "team": "recsys", "user": "bo", "app": "server", "max_per_node": None},
        {"name": "etl", "cpu": 2.5, "memory": "1.5Gi", "app": "trainer", "priority": -3, "disk": "10Gi"},
        {"name": "notebook", "cpu": "1", "memory": "512Mi", "gpu": 0.5, "creation_time": 5},
    ], name="w.json")
    check_hand_computed(load_workload_file(path))


def test_minimal_csv_uses_defaults(tmp_path) -> None:
    w = load_workload_file(write(tmp_path, "w.csv", "name,cpu,memory\na,1,1Gi\n"))
    assert (w.num_gpu[0], w.gpu_milli[0], w.app[0], w.max_per_node[0], w.priority[0]) == (0, 0, -1, -1, 0)
    assert w.gpu_model[0] == "" and w.team[0] == "" and math.isnan(w.creation_time[0]) and w.app_names == ()


def test_examples_load_alike() -> None:
    csv_pods = load_workload_file(EXAMPLES / "workload.csv")
    assert len(csv_pods) == 30
    assert_same_workload(csv_pods, load_workload_file(EXAMPLES / "workload.jsonl"))
    nodes = load_cluster_file(EXAMPLES / "cluster.yaml")
    assert set(nodes.gpu_model) == {"A100", "T4", ""}


def assert_same_workload(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
    assert a.app_names == b.app_names


CSV_ERRORS = [
    ("cpu", "four", "'four' is not a number; write cores"),
    ("cpu", "", "value is missing"),
    ("memory", "8GB", "unknown unit 'GB'"),
    ("gpu", "1.5", "neither a share of one GPU nor whole GPUs"),
    ("gpu", "-1", "must not be negative"),
    ("gpu_model", "A100 H100", "is not a list of GPU model names"),
    ("rdma", "101", "'101' is above 100"),
    ("max_per_node", "0", "use -1 for no limit"),
    ("priority", "high", "'high' is not a number"),
    ("creation_time", "-5", "must not be negative"),
    ("disk", "1Pi", "unknown unit 'Pi'"),
    ("memory", "1e15Ti", "'1e15Ti' is out of range"),
    ("name", "train", "'train' already used on line "),
]


@pytest.mark.parametrize(("column", "value", "says"), CSV_ERRORS)
def test_workload_csv_errors(tmp_path, column, value, says) -> None:
    header = WORKLOAD.splitlines()[0].split(",")
    cells = WORKLOAD.splitlines()[2].split(",")  # serve, line 3
    cells[header.index(column)] = value
    lines = WORKLOAD.splitlines()
    lines[2] = ",".join(cells)
    with pytest.raises(TraceError) as err:
        load_workload_file(write(tmp_path, "pods.csv", "\n".join(lines) + "\n"))
    assert_error(err, "pods.csv", 3, column, says)


@pytest.mark.parametrize(("column", "value", "says"), CSV_ERRORS)
def test_workload_jsonl_errors(tmp_path, column, value, says) -> None:
    pods = [{"name": "train", "cpu": 1, "memory": 1, "app": "x"},
            {"name": "serve", "cpu": 1, "memory": 1, "gpu": 1, "app": "x", column: value}]
    with pytest.raises(TraceError) as err:
        load_workload_file(workload_jsonl(tmp_path, pods, "pods.jsonl"))
    assert_error(err, "pods.jsonl", 2, column, says)


@pytest.mark.parametrize(("pod", "field", "says"), [
    ({"gpu": 0, "gpu_model": "T4"}, "gpu_model", "the pod asks for no GPU"),
    ({"creation_time": 10, "deletion_time": 5}, "deletion_time", "5 is before creation_time 10"),
    ({"creation_time": 1, "deletion_time": 5, "duration": 3}, "duration", "give only one of them"),
    ({"duration": 3}, "duration", "needs creation_time"),
    ({"app": None, "max_per_node": 2}, "max_per_node", "needs an app"),
    ({"colour": "red"}, "colour", "unknown key; rename or remove it (known keys: name, cpu"),
    ({"cpu": [1, 2]}, "cpu", "[1, 2] is not allowed; write a string or a number"),
    ({"cpu": True}, "cpu", "'true' is not a number"),
])
def test_workload_rules(tmp_path, pod, field, says) -> None:
    pods = [{"name": "a", "cpu": 1, "memory": 1}, {"name": "b", "cpu": 1, "memory": 1, "gpu": 1, "app": "x", **pod}]
    with pytest.raises(TraceError) as err:
        load_workload_file(workload_jsonl(tmp_path, pods, "pods.jsonl"))
    assert_error(err, "pods.jsonl", 2, field, says)


@pytest.mark.parametrize(("text", "line", "field", "says"), [
    ('{"name": "a", "cpu": 1, "memory": 1}\n{"name": "b",\n', 2, None, "invalid JSON"),
    ('{"name": "a", "cpu": 1, "memory": 1}\n[1]\n', 2, None, "not a JSON object"),
    ('{"name": "a", "name": "b", "cpu": 1, "memory": 1}\n', 1, "name", "duplicate key"),
    ('\n\n', None, None, "holds no pods"),
    ('{"name": "a", "memory": 1}\n', 1, "cpu", "value is missing"),
])
def test_jsonl_structure_errors(tmp_path, text, line, field, says) -> None:
    with pytest.raises(TraceError) as err:
        load_workload_file(write(tmp_path, "pods.jsonl", text))
    assert_error(err, "pods.jsonl", line, field, says)


@pytest.mark.parametrize(("name", "text", "line", "field", "says"), [
    ("pods.csv", "name,cpu,memory,colour\na,1,1,red\n", 1, "colour", "unknown column; rename or remove it"),
    ("pods.csv", "name,cpu\na,1\n", 1, "memory", "required column is missing"),
    ("pods.csv", "name,cpu,memory,gpu\na,1,1,1\nb,4,16", 3, "gpu", "malformed CSV: 3 fields, the header has 4"),
    ("pods.txt", "name,cpu,memory\n", None, None, "name it .csv, .jsonl or .json"),
])
def test_workload_file_errors(tmp_path, name, text, line, field, says) -> None:
    with pytest.raises(TraceError) as err:
        load_workload_file(write(tmp_path, name, text))
    assert_error(err, name, line, field, says)


# ---------------------------------------------------------------- round trip
TEXT = st.text(alphabet="abcxyz-_", min_size=0, max_size=5)
POD = st.fixed_dictionaries({
    "cpu_milli": st.integers(0, 10**6),
    "memory_mib": st.integers(0, 10**7),
    "gpu": st.one_of(st.just((0, 0)), st.tuples(st.just(1), st.integers(1, 999)),
                     st.tuples(st.integers(1, 8), st.just(1000))),
    "gpu_model": st.sampled_from(["", "A100", "T4|A100"]),
    "creation_time": st.one_of(st.none(), st.integers(0, 10**6)),
    "duration": st.one_of(st.none(), st.integers(0, 10**5)),
    "team": TEXT, "user": TEXT, "app": TEXT,
    "max_per_node": st.integers(-1, 4).filter(lambda k: k != 0),
    "priority": st.integers(-100, 100),
    "rdma": st.integers(0, 100),
    "disk_mib": st.integers(0, 10**7),
})


def pod_cells(i: int, pod: dict) -> dict[str, object]:
    """One generated pod as file values, in mixed units."""
    k, milli = pod["gpu"]
    cells = {
        "name": f"pod-{i}",
        "cpu": f"{pod['cpu_milli']}m" if i % 2 else pod["cpu_milli"] / 1000,
        "memory": f"{pod['memory_mib'] * 1024}Ki" if i % 3 == 0 else pod["memory_mib"],
        "gpu": k if milli == 1000 else milli / 1000,
        "gpu_model": pod["gpu_model"] if k else "",
        "creation_time": pod["creation_time"],
        "duration": pod["duration"] if pod["creation_time"] is not None else None,
        "team": pod["team"], "user": pod["user"], "app": pod["app"],
        "max_per_node": pod["max_per_node"] if pod["app"] else -1,
        "priority": pod["priority"], "rdma": pod["rdma"], "disk": f"{pod['disk_mib']}Mi",
    }
    return {key: value for key, value in cells.items() if value not in (None, "")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pods=st.lists(POD, min_size=1, max_size=12))
def test_round_trip_csv_and_jsonl(tmp_path, pods) -> None:
    rows = [pod_cells(i, pod) for i, pod in enumerate(pods)]
    columns = ["name", "cpu", "memory", "gpu", "gpu_model", "creation_time", "duration", "team", "user",
               "app", "max_per_node", "priority", "rdma", "disk"]
    csv_text = "\n".join([",".join(columns), *(",".join(str(r.get(c, "")) for c in columns) for r in rows)])
    from_csv = load_workload_file(write(tmp_path, "rt.csv", csv_text + "\n"))
    from_jsonl = load_workload_file(workload_jsonl(tmp_path, rows, "rt.jsonl"))
    assert_same_workload(from_csv, from_jsonl)
    assert list(from_csv.cpu_milli) == [p["cpu_milli"] for p in pods]
    assert list(from_csv.memory_mib) == [p["memory_mib"] for p in pods]
    assert list(from_csv.disk_mib) == [p["disk_mib"] for p in pods]
    assert [(int(k), int(m)) for k, m in zip(from_csv.num_gpu, from_csv.gpu_milli)] == [p["gpu"] for p in pods]
    assert list(from_csv.gpu_model) == [p["gpu_model"] if p["gpu"][0] else "" for p in pods]
    assert list(from_csv.priority) == [p["priority"] for p in pods]
    assert list(from_csv.rdma) == [p["rdma"] for p in pods]
    assert list(from_csv.team) == [p["team"] for p in pods]
    apps = [p["app"] for p in pods]
    assert [from_csv.app_names[a] if a >= 0 else "" for a in from_csv.app] == apps
    expected_end = [np.nan if p["creation_time"] is None or p["duration"] is None
                    else p["creation_time"] + p["duration"] for p in pods]
    assert np.array_equal(from_csv.deletion_time, np.array(expected_end, dtype=float), equal_nan=True)


# ---------------------------------------------------------------- load_inputs and CLI
def test_load_inputs_mixes_files_and_traces(tmp_path) -> None:
    cluster, workload = EXAMPLES / "cluster.yaml", EXAMPLES / "workload.csv"
    nodes, pods = load_inputs("synthetic", cluster, None)
    assert len(nodes) == 14 and pods.source == "synthetic" and len(pods) > 30
    with pytest.raises(TraceError, match="pod 'llm-pretrain-0' asks for GPU model 'A100'"):
        load_inputs("synthetic", None, workload)  # the synthetic cluster has no A100
    nodes, pods = load_inputs("not-a-trace", cluster, workload)  # the trace is not read
    assert (len(nodes), len(pods)) == (14, 30)


def test_pods_asking_for_a_model_no_node_has_are_refused_by_name(tmp_path) -> None:
    """Before, such pods only showed up as never placed; the error names the first pod, the count and the models."""
    csv = ("name,cpu,memory,gpu,gpu_model,creation_time,deletion_time\n"
           "a,1,1Gi,1,T4|A100,0,10\nb,1,1Gi,1,H100|B200,0,10\nc,1,1Gi,0.5,H100|B200,0,10\n")
    with pytest.raises(TraceError) as err:
        load_inputs("synthetic", None, write(tmp_path, "w.csv", csv))
    assert_error(err, "w.csv", None, "gpu_model", "pod 'b' asks for GPU model 'H100|B200', which no node of "
                 "synthetic has (2 pods ask for it; the cluster's models: G2, G3, P100, T4, V100M16, V100M32)")
    nodes, pods = load_inputs("synthetic", None, write(tmp_path, "ok.csv", csv.replace("H100|B200", "V100M32")))
    assert len(nodes) == 120 and pods.source == "ok.csv" and len(pods) == 3
    with pytest.raises(TraceError, match=r"'H100', which no node of cluster.yaml has \(1 pod asks for it; the "
                       r"cluster's models: A100, T4\)"):
        load_inputs("synthetic", EXAMPLES / "cluster.yaml",
                    write(tmp_path, "a.csv", csv.replace("H100|B200", "T4").replace("T4|A100", "H100")))


runner = CliRunner()


@pytest.mark.parametrize("command", [
    ["simulate", "--rng", "native", "--workers", "1", "--cluster", str(EXAMPLES / "cluster.yaml"),
     "--workload", str(EXAMPLES / "workload.csv")],
    ["replay", "--cluster", str(EXAMPLES / "cluster.yaml"), "--workload", str(EXAMPLES / "workload.jsonl")],
])
def test_cli_runs_on_files(command) -> None:
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "on cluster.yaml: 30 pods on 14 nodes (56 GPUs)" in result.output and "│ FGD " in result.output


@pytest.mark.parametrize("command", ["simulate", "replay"])
def test_cli_bad_files_exit_2_without_traceback(tmp_path, command) -> None:
    bad = write(tmp_path, "bad.yaml", "pools:\n  - {name: a, count: 0, cpu: 1, memory: 1}\n")
    result = runner.invoke(app, [command, "--cluster", str(bad)])
    assert result.exit_code == 2
    assert "bad.yaml line 2, field 'pools[0].count'" in result.output and "Traceback" not in result.output
    bad = write(tmp_path, "bad.csv", "name,cpu,memory,gpu\na,1,1Gi,1.5\n")
    result = runner.invoke(app, [command, "--workload", str(bad)])
    assert result.exit_code == 2
    assert "bad.csv line 2, field 'gpu'" in result.output and "Traceback" not in result.output
