"""DLRM v2025 loader, peak demand and cluster sizing on small hand-written files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from quasched.traces import TraceError, dlrm_cluster, load_dlrm, peak_demand

HEADER = ("instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,"
          "memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,"
          "scheduled_time,deletion_time")
ROWS = [
    "i0,HN,app_b,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,",
    "i1,HN,app_a,8,8,0.25,0.25,50,50,0.5,0.5,1,1,-1,100,101,200",
    "i2,CN,app_b,2.5,2.5,0,0,1,1,16,16,0,0,2,150,,",
    "i3,HN,app_c,64,64,4,4,100,100,400,400,10,10,1,,,300",
]


def write(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "dlrm.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_conversion(tmp_path) -> None:
    w = load_dlrm(write(tmp_path, *ROWS))
    assert list(w.name) == ["i0", "i1", "i2", "i3"] and w.name.dtype == object
    assert list(w.cpu_milli) == [12000, 8000, 2500, 64000]
    assert list(w.memory_mib) == [122880, 512, 16384, 409600]
    assert list(w.disk_mib) == [655360, 1024, 0, 10240]
    assert list(w.num_gpu) == [1, 1, 0, 4] and list(w.gpu_milli) == [1000, 250, 0, 1000]
    assert list(w.rdma) == [25, 50, 1, 100] and list(w.max_per_node) == [8, -1, 2, 1]
    assert w.app_names == ("app_a", "app_b", "app_c") and list(w.app) == [1, 0, 1, 2]
    assert list(w.role) == ["HN", "HN", "CN", "HN"]
    assert math.isnan(w.creation_time[0]) and w.creation_time[1] == 100 and w.deletion_time[3] == 300
    assert math.isnan(w.deletion_time[2])


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [
        ("gpu_request", "1.5", "must be whole GPUs"),
        ("gpu_request", "0.0001", "below 0.001 GPU"),
        ("rdma_request", "150", "'150' is above 100"),
        ("max_instance_per_node", "0", "use -1 for no limit"),
        ("max_instance_per_node", "-2", "'-2' is below -1"),
        ("role", "GN", "'GN' is not one of 'CN', 'HN'"),
        ("app_name", "", "value is missing"),
        ("memory_request", "lots", "'lots' is not a number"),
        ("rdma_request", "2.5", "'2.5' is not an integer"),
        ("instance_sn", "i0", "'i0' already used on line 2"),
        ("deletion_time", "100", "100 is before creation_time 150; a pod cannot end before it starts"),
    ],
)
def test_bad_values(tmp_path, column, value, text) -> None:
    cells = ROWS[2].split(",")
    cells[HEADER.split(",").index(column)] = value
    with pytest.raises(TraceError) as err:
        load_dlrm(write(tmp_path, *ROWS[:2], ",".join(cells)))
    assert (err.value.row, err.value.field) == (4, column) and text in err.value.message


def test_missing_column(tmp_path) -> None:
    path = tmp_path / "dlrm.csv"
    path.write_text(HEADER.replace(",role", "") + "\n" + ROWS[0].replace(",HN", "") + "\n")
    with pytest.raises(TraceError) as err:
        load_dlrm(path)
    assert (err.value.row, err.value.field) == (1, "role")


def test_peak_demand(tmp_path) -> None:
    # i0 alive always, i1 on [100, 200), i2 from 150 on, i3 until 300
    w = load_dlrm(write(tmp_path, *ROWS))
    peak = peak_demand(w)
    assert peak["cpu_milli"] == 12000 + 8000 + 2500 + 64000
    assert peak["gpu_milli"] == 1000 + 250 + 4000
    assert peak["rdma"] == 25 + 50 + 1 + 100


def test_departure_before_arrival_at_equal_times(tmp_path) -> None:
    rows = ["a,HN,x,10,10,1,1,10,10,1,1,1,1,-1,0,,100", "b,HN,x,10,10,1,1,10,10,1,1,1,1,-1,100,,200"]
    assert peak_demand(load_dlrm(write(tmp_path, *rows)))["cpu_milli"] == 10000


def test_cluster_sizing(tmp_path) -> None:
    w = load_dlrm(write(tmp_path, *ROWS))
    nodes = dlrm_cluster(w)  # RDMA binds: peak 176 % of one NIC -> 2 nodes
    assert len(nodes) == 2 and nodes.total_gpus == 16
    assert list(nodes.rdma) == [100, 100] and set(nodes.gpu_model) == {"GPU"}
    assert len(dlrm_cluster(w, headroom=2.0)) == 4
    assert len(dlrm_cluster(w, rdma=400)) == 1
    assert len(dlrm_cluster(w, rdma=400, cpu_milli=40_000)) == 3  # 86.5 cores
    assert len(dlrm_cluster(w, rdma=400, num_gpus=1)) == 6  # 5.25 GPUs


def test_real_trace_cluster(data_dir) -> None:
    w = load_dlrm(data_dir / "alibaba-gpu-v2025/disaggregated_DLRM_trace.csv")
    peak = peak_demand(w)
    nodes = dlrm_cluster(w)
    assert len(nodes) == math.ceil(peak["memory_mib"] / (1024 * 1024))  # memory binds on this trace
    assert nodes.cpu_milli.sum() >= peak["cpu_milli"] and 8000 * len(nodes) >= peak["gpu_milli"]
    assert np.all(nodes.num_gpus == 8)
