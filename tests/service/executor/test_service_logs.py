"""A job's log within its cap: the capped log's files and view by hand-computed byte counts; a real job writing
1 GiB leaves at most the cap on disk while the API answers, and its log shows head, marker and tail; past a
team's cap its oldest finished jobs' logs are removed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from accounts import command_accounts, shared_dir
from api_support import bearer, live_server, make_app
from test_service_runs import HTTP_S, assert_no_process_left, box_cluster, log, submit, wait

from quasched.policies.registry import parse_spec
from quasched.service.executor import joblog
from quasched.service.executor.joblog import Caps, Writer
from quasched.service.loop.state import LoopOptions

LETTERS = b"abcdefghijklmnopqrstu"  # 21 bytes


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def on_disk(path: Path) -> int:
    """Bytes of the log's files (one deleted while counted counts 0)."""
    total = 0
    for file in joblog.files(path):
        try:
            total += file.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_head_then_the_last_two_segments_with_a_marker(tmp_path):
    """head 10, tail 8 (segments of 4): 10 + 21 bytes keep the head, the segments at 26 and 30, 16 dropped."""
    path = tmp_path / "7.log"
    writer = Writer(path, Caps(head=10, tail=8))
    writer.write(b"0123456789")
    writer.write(LETTERS)
    writer.close()
    assert names(tmp_path) == ["7.log", "7.log.26", "7.log.30"]
    assert (path.read_bytes(), (tmp_path / "7.log.26").read_bytes(), (tmp_path / "7.log.30").read_bytes()) == \
        (b"0123456789", b"qrst", b"u")
    assert joblog.end(path) == 31
    assert joblog.read(path) == (b"0123456789\n--- quasched: 16 bytes dropped ---\nqrstu", 31)
    assert joblog.read(path, 3, limit=4) == (b"3456", 7)  # within the head
    assert joblog.read(path, 12) == (b"\n--- quasched: 14 bytes dropped ---\nqrstu", 31)  # from within the gap
    assert joblog.read(path, 28) == (b"st" b"u", 31)
    assert joblog.read(path, 31) == (b"", 31)
    assert joblog.tail(path, 3) == (b"stu", 31)
    assert joblog.tail(path, 6) == (b"qrstu", 31)  # its start falls among the dropped bytes: the tail kept
    assert joblog.tail(path, 100, lines=1) == (b"qrstu", 31)


def test_a_new_writer_resumes_where_the_files_say(tmp_path):
    """The next run's writer (or the executor's header line) continues the same log within the same cap."""
    path, caps = tmp_path / "7.log", Caps(head=10, tail=8)
    joblog.append(path, caps, b"01234567")  # 8: the head is not full
    joblog.append(path, caps, b"89ab")  # 2 fill the head, 2 start the segment at 10
    assert names(tmp_path) == ["7.log", "7.log.10"] and path.read_bytes() == b"0123456789"
    joblog.append(path, caps, b"cdefghij")  # 2 more fill the segment at 10; then segments at 14 and 18
    assert names(tmp_path) == ["7.log", "7.log.14", "7.log.18"]
    assert joblog.read(path) == (b"0123456789\n--- quasched: 4 bytes dropped ---\nefghij", 20)


def test_a_log_within_its_cap_is_whole_and_a_removed_one_says_why(tmp_path):
    path = tmp_path / "3.log"
    joblog.append(path, Caps(head=10, tail=8), b"line 1\nline 2\n")  # 14 bytes: the head and one segment
    assert joblog.read(path) == (b"line 1\nline 2\n", 14)
    assert joblog.tail(path, 100, lines=1) == (b"line 2\n", 14)
    assert joblog.remove(path, "gone") == 14 - 5
    assert names(tmp_path) == ["3.log"] and joblog.read(path) == (b"gone\n", 5)
    assert Caps.of_total(64 << 20) == Caps(32 << 20, 32 << 20) and Caps.of_total(5) == Caps(3, 2)


@pytest.fixture
def capped(tmp_path, monkeypatch):
    """A live server running commands on ``box`` with a log cap of 2 MiB a job and 5 MiB a team."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    jobs_dir = shared_dir()
    with command_accounts("logs") as accounts:
        options = LoopOptions(local_node="box", grace_s=2.0, policy=parse_spec("bestfit"), log_cap=2 << 20, team_log_cap=5 << 20)
        application, token = make_app(tmp_path, clock=time.time, cluster=box_cluster(), state_dir=tmp_path / "state",
                                      options=options, run_as=accounts, jobs_dir=jobs_dir)
        with live_server(application) as base:
            yield base, bearer(token), tmp_path / "state" / "jobs"
        assert_no_process_left(tmp_path / "state")


@pytest.mark.slow  # a real server
def test_a_job_writing_1_gib_keeps_its_cap_while_the_api_answers(capped):
    base, headers, jobs = capped
    job = submit(base, headers, "import os, sys\nfor _ in range(1024): os.write(1, b'x' * (1 << 20))", gpus=0)
    path = jobs / f"{job['id']}.log"
    while True:  # the API keeps answering while the job writes, and the log stays within its cap
        r = httpx.get(f"{base}/api/v1/jobs/{job['id']}", headers=headers, timeout=HTTP_S)
        assert r.status_code == 200 and r.json()["id"] == job["id"]
        assert httpx.get(f"{base}/api/v1/jobs", headers=headers, timeout=HTTP_S).status_code == 200
        assert on_disk(path) <= 2 << 20
        if r.json()["state"] != "running":
            break
        time.sleep(0.05)
    assert wait(base, headers, job["id"], "succeeded")["exit_code"] == 0
    header = path.read_bytes()[:path.read_bytes().index(b"\n") + 1]
    assert header.startswith(b"--- quasched: run 1 of job ")
    total = len(header) + (1 << 30)
    kept = on_disk(path)
    assert joblog.end(path) == total and kept <= 2 << 20
    view = log(base, headers, job["id"]).encode()
    head, rest = view.split(b"\n--- quasched: ", 1)
    marker, tail = rest.split(b" ---\n", 1)
    assert head == header + b"x" * ((1 << 20) - len(header))  # the first MiB
    assert marker == f"{total - kept} bytes dropped".encode()
    assert tail == b"x" * (kept - (1 << 20)) and len(tail) >= 1 << 19  # at least half the tail's MiB
    followed = httpx.get(f"{base}/api/v1/jobs/{job['id']}/logs", params={"follow": "true"}, headers=headers,
                         timeout=HTTP_S).content
    assert followed == view
    last = httpx.get(f"{base}/api/v1/jobs/{job['id']}/logs", params={"tail": 1}, headers=headers, timeout=HTTP_S)
    assert last.content == tail


@pytest.mark.slow  # a real server
def test_past_the_team_cap_the_oldest_finished_logs_go(capped):
    """Six jobs whose logs are a header line and 1 MiB each (within the job's cap): once the fifth ends they take
    over 5 MiB and the first job's log goes (a note stays); once the sixth ends, the second's."""
    base, headers, jobs = capped
    code = "import os\nfor _ in range(2): os.write(1, b'y' * (1 << 19))"
    ids = []
    for _ in range(6):
        job = submit(base, headers, code, gpus=0)
        wait(base, headers, job["id"], "succeeded")
        ids.append(job["id"])
    note = "--- quasched: log removed: the logs of team default took more than its cap ---\n"
    deadline = time.monotonic() + 30
    while log(base, headers, ids[1]) != note:
        assert time.monotonic() < deadline, [on_disk(jobs / f"{i}.log") for i in ids]
        time.sleep(0.05)
    assert log(base, headers, ids[0]) == note
    for job_id in ids[2:]:
        assert log(base, headers, job_id).count("y") == 1 << 20
    assert sum(on_disk(jobs / f"{i}.log") for i in ids) <= 5 << 20
