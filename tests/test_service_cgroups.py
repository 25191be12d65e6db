"""What a job can take: the cgroup arithmetic (paths, limits, layouts v1 and v2 on fake trees)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quasched.service import cgroups
from quasched.service.cgroups import Hierarchy

ROOT = os.geteuid() == 0


def test_limits_of_a_job_v1_and_v2():
    assert cgroups.limits(2, 1 << 30, 1500) == [("memory.max", "1073741824"), ("memory.swap.max", "0"),
                                                ("cpu.max", "150000 100000")]
    assert cgroups.limits(1, 256 << 20, 5) == [  # 5 milli-CPUs: 500 µs a period, raised to the kernel's least
        ("memory.limit_in_bytes", "268435456"), ("memory.memsw.limit_in_bytes", "268435456"),
        ("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "1000")]
    assert cgroups.limits(1, None, 250) == [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "25000")]
    assert cgroups.limits(2, None, None) == []
    assert cgroups.job_cgroup("0123abcd", 7, 2) == "quasched/0123abcd-job-7-2"
    tag = cgroups.tag_of(Path("/srv/quasched-state"))
    assert len(tag) == 8 and tag == cgroups.tag_of(Path("/srv/quasched-state/")) != cgroups.tag_of(Path("/srv/x"))


@pytest.mark.skipif(not ROOT, reason="detect() needs root")
def test_detect_v2_and_v1_below_the_service_cgroup(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "system.slice" / "quasched.service").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    own = tmp_path / "own"
    own.write_text("0::/system.slice/quasched.service\n")
    assert cgroups.detect(v2, own) == Hierarchy(2, {"unified": v2 / "system.slice" / "quasched.service"})
    v1 = tmp_path / "v1"
    for ctrl in ("memory", "cpu", "freezer", "pids"):
        (v1 / ctrl).mkdir(parents=True)
        (v1 / ctrl / "cgroup.procs").write_text("")
    (v1 / "memory" / "box").mkdir()
    own.write_text("4:memory:/box\n3:cpu,cpuacct:/gone\n2:freezer:/\n1:pids:/\n")
    # memory: the service's own cgroup; cpu: its cgroup is not in this mount (a namespace): the mount's root
    assert cgroups.detect(v1, own) == Hierarchy(1, {"memory": v1 / "memory" / "box", "cpu": v1 / "cpu",
                                                    "freezer": v1 / "freezer"})
    assert isinstance(cgroups.detect(tmp_path / "none", own), str)


@pytest.mark.skipif(not ROOT, reason="detect() needs root")
def test_create_writes_the_limits_a_hierarchy_has_and_leftovers_are_found(tmp_path):
    h = Hierarchy(1, {"memory": tmp_path / "memory", "cpu": tmp_path / "cpu"})
    name = cgroups.job_cgroup("abcd1234", 3, 1)
    for ctrl, files in (("memory", ("memory.limit_in_bytes",)), ("cpu", ("cpu.cfs_period_us", "cpu.cfs_quota_us"))):
        (tmp_path / ctrl / name).mkdir(parents=True)  # what the kernel makes with a cgroup (no memsw: no swap)
        for file in files:
            (tmp_path / ctrl / name / file).write_text("")
    assert cgroups.create(h, name, 512 << 20, 2000) == []
    assert (tmp_path / "memory" / name / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (tmp_path / "cpu" / name / "cpu.cfs_quota_us").read_text() == "200000"
    assert cgroups.create(Hierarchy(1, {"cpu": tmp_path / "cpu"}), name, 1 << 20, None) == \
        ["memory.limit_in_bytes: not available"]  # no memory hierarchy
    (tmp_path / "cpu" / "quasched" / "ffff0000-job-4-0").mkdir()
    (tmp_path / "cpu" / "quasched" / "abcd1234-notes").mkdir()
    assert cgroups.leftovers(h, "abcd1234") == [(3, 1, name)]
