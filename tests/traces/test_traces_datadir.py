"""Trace file resolution: search order, offline errors, atomic download (no network)."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest

from quasched.traces import TraceError, TraceNotFound, datadir, load_trace, resolve_trace, upstream_url

REL = "alibaba-gpu-v2023/openb_pod_list_default.csv"


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict[str, Path]:
    """Empty explicit, environment and cache folders; no network."""
    dirs = {name: tmp_path / name for name in ("explicit", "env", "xdg")}
    for path in dirs.values():
        path.mkdir()
    monkeypatch.setenv("QUASCHED_DATA", str(dirs["env"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(dirs["xdg"]))

    def offline(url: str, dest: Path, timeout: float = 0) -> None:
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(datadir, "fetch", offline)
    return dirs


def put(folder: Path, rel: str = REL) -> Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    return path


def test_search_order(env) -> None:
    cached = put(env["xdg"] / "quasched")
    assert resolve_trace(REL, env["explicit"]) == cached
    in_env = put(env["env"])
    assert resolve_trace(REL, env["explicit"]) == in_env
    explicit = put(env["explicit"])
    assert resolve_trace(REL, env["explicit"]) == explicit


def test_cache_dir_falls_back_to_home(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert datadir.cache_dir() == tmp_path / ".cache" / "quasched"


def test_offline_error_names_file_locations_and_fixes(env) -> None:
    with pytest.raises(TraceNotFound) as err:
        resolve_trace(REL, env["explicit"])
    text = str(err.value)
    assert text.startswith(f"file {REL!r} not found")
    for label, folder in (("--data-dir", env["explicit"]), ("QUASCHED_DATA", env["env"]),
                          ("user cache", env["xdg"] / "quasched")):
        assert f"{folder / REL} ({label})" in text
    assert "network is unreachable" in text and upstream_url(REL) in text
    assert "--data-dir DIR" in text and "QUASCHED_DATA=DIR" in text
    assert "run once on a machine with internet access" in text
    assert err.value.searched == tuple(f"{f / REL} ({l})" for l, f in (
        ("--data-dir", env["explicit"]), ("QUASCHED_DATA", env["env"]), ("user cache", env["xdg"] / "quasched")))


def test_no_download_when_disabled(env, monkeypatch) -> None:
    monkeypatch.setattr(datadir, "fetch", lambda *a, **k: pytest.fail("download attempted"))
    with pytest.raises(TraceNotFound) as err:
        resolve_trace(REL, download=False)
    assert "Download" not in str(err.value) and "(--data-dir)" not in str(err.value)


def test_download_goes_into_the_cache(env, monkeypatch) -> None:
    calls = []

    def fake(url: str, dest: Path, timeout: float = 0) -> None:
        calls.append(url)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text("data")

    monkeypatch.setattr(datadir, "fetch", fake)
    path = resolve_trace("alibaba-gpu-v2025/disaggregated_DLRM_trace.csv")
    assert path == env["xdg"] / "quasched/alibaba-gpu-v2025/disaggregated_DLRM_trace.csv"
    assert calls == ["https://raw.githubusercontent.com/alibaba/clusterdata/master/"
                     "cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv"]


def test_upstream_urls() -> None:
    assert upstream_url(REL) == ("https://raw.githubusercontent.com/alibaba/clusterdata/master/"
                                 "cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv")
    assert upstream_url("elsewhere/file.csv") is None


def test_fetch_is_atomic(tmp_path) -> None:
    source = tmp_path / "source.csv"
    source.write_text("a,b\n1,2\n")
    dest = tmp_path / "cache" / "sub" / "file.csv"
    datadir.fetch(source.as_uri(), dest)
    assert dest.read_text() == "a,b\n1,2\n"
    with pytest.raises(OSError):
        datadir.fetch((tmp_path / "missing.csv").as_uri(), tmp_path / "cache" / "other.csv")
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == ["file.csv", "sub"]


def test_load_trace_reports_missing_files(env) -> None:
    with pytest.raises(TraceNotFound, match="openb_node_list_gpu_node.csv"):
        load_trace("openb-default", env["explicit"])
    with pytest.raises(TraceError, match="openb-nope: unknown trace; known: synthetic, openb-default"):
        load_trace("openb-nope")
