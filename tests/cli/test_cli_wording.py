"""What the terminal says: nouns agree with their numbers, counts have no decimals, durations never read "1m 60s",
quotas read as GPUs per model, and every error (usage errors too) is one ``error:`` line. Hand-computed cases, and
the client commands against a live server on a one-node cluster."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from api_support import live_server, make_app
from repo import REPO
from typer.testing import CliRunner

from quasched.cli import app
from quasched.cli.client import coarse_duration
from quasched.model.nodes import NodeSpec
from quasched.report.tables import _count
from quasched.report.wording import counted, quota_text

FORMAT_JS = REPO / "quasched" / "service" / "api" / "dashboard" / "format.js"


def test_counted_agrees_and_drops_whole_decimals():
    assert [counted(1, "node"), counted(3, "node"), counted(0, "job")] == ["1 node", "3 nodes", "0 jobs"]
    assert [counted(1_000, "pod"), counted(3.0, "pod"), counted(0.5, "GPU")] == ["1,000 pods", "3 pods", "0.5 GPUs"]
    assert [counted(1, "policy", "policies"), counted(2, "policy", "policies")] == ["1 policy", "2 policies"]


def test_quota_text():
    assert quota_text({"G2": 8.0}) == "G2: 8 GPUs"
    assert quota_text({"A100": 1.0, "*": 0.5}) == "A100: 1 GPU, *: 0.5 GPUs"
    assert quota_text({}) == "unlimited"


def test_coarse_duration_rounds_into_the_next_unit():
    cases = {0: "0s", 59.4: "59s", 59.6: "1m", 119.6: "2m", 3599: "1h", 3 * 3600 + 59: "3h", 86399: "1d",
             3 * 86400: "3d", -5: "0s"}
    assert {s: coarse_duration(s) for s in cases} == cases


def test_pod_counts_of_one_run_are_whole():
    assert _count([739.0]) == "739"
    assert _count([3.0, 4.0]) == "3.5±0.5"  # mean 3.5, population std 0.5
    assert _count([float("nan")]) == "-"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the dashboard's format.js")
def test_dashboard_duration_never_shows_60_seconds_or_minutes():
    cases = {"45": "45s", "59.6": "1m 00s", "119.6": "2m 00s", "3599.6": "1h 00m", "7500": "2h 05m",
             "86399.7": "1d 0h"}
    script = (f"import({json.dumps(FORMAT_JS.as_uri())}).then(f => console.log(JSON.stringify("
              f"[{', '.join(cases)}].map(f.fmtDuration))))")
    done = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == list(cases.values())



@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the dashboard's format.js")
def test_dashboard_requests_count_cores_and_gpus_in_agreement():
    jobs = [{"gpus": 0.5, "gpu_model": "V100", "cpu": 1, "memory_mib": 1024, "pods": 1},
            {"gpus": 2, "gpu_model": "", "cpu": 0.5, "memory_mib": 4096, "pods": 3},
            {"gpus": 1, "gpu_model": "", "cpu": 4, "memory_mib": 512, "pods": 1}]
    script = (f"import({json.dumps(FORMAT_JS.as_uri())}).then(f => console.log(JSON.stringify("
              f"{json.dumps(jobs)}.map(f.fmtRequest))))")
    done = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["0.5 GPU V100 · 1 core · 1 GiB", "3 × (2 GPUs · 0.5 cores · 4 GiB)",
                                       "1 GPU · 4 cores · 512 MiB"]

def test_a_usage_error_is_one_error_line_like_every_other():
    command = Path(sys.executable).with_name("quasched")  # the installed command, in a real process
    done = subprocess.run([str(command), "batch", "--machines", "10:100:x"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: Invalid value for --machines: bad machine list '10:100:x': use 10:100:10 or 10,20,30",
        "Try 'quasched batch --help' for help."]
    result = CliRunner().invoke(app, ["simulate", "--no-such-option"])
    assert result.exit_code == 2 and result.output.startswith("error: No such option: --no-such-option")
    assert "Error" not in result.output


@pytest.fixture
def one_node_server(tmp_path, monkeypatch):
    """The environment of the client commands against a live server whose cluster is one 1-GPU node."""
    node = NodeSpec(name=np.array(["g2-0"], dtype=object), cpu_milli=np.array([4000]),
                    memory_mib=np.array([8192]), num_gpus=np.array([1]), gpu_model=np.array(["G2"], dtype=object))
    service_app, token = make_app(tmp_path, clock=time.time, cluster=node)
    monkeypatch.chdir(tmp_path)
    with live_server(service_app) as base:
        yield {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": token, "COLUMNS": "200"}


def test_client_commands_say_one_node_one_job_and_gpus_per_model(one_node_server):
    env = one_node_server

    def cli(*args: str) -> str:
        result = CliRunner().invoke(app, list(args), env=env)
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        return result.output

    assert cli("queue", "default", "--quota", "G2=8").startswith("queue default: quota G2: 8 GPUs, cohort -")
    assert cli("submit", "--gpus", "1", "--cpu", "1", "--memory", "1GiB", "--name", "a").startswith("job 1 (a) running")
    assert re.search(r"\b1 job\b", cli("jobs")) and "1 jobs" not in cli("jobs")
    assert re.search(r"\b1 node\b", cli("nodes")) and "1 nodes" not in cli("nodes")
    waiting = cli("submit", "--gpus", "1", "--cpu", "1", "--memory", "1GiB", "--name", "b")
    assert "needs 1 GPU; 0 free on nodes it may use" in waiting
