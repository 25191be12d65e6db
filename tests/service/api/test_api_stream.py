"""Live stream (SSE) and the timer thread, on a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
import queue
import threading
import time

import httpx
from api_support import bearer, job_body, live_server, make_app

API = "/api/v1"


def read_events(url: str, params: dict, headers: dict, out: queue.Queue, ready: threading.Event,
                stop: threading.Event) -> None:
    """Put every (event, data) of the stream into ``out`` until ``stop`` (or the server closes)."""
    try:
        _read(url, params, headers, out, ready, stop)
    except httpx.HTTPError:
        if not stop.is_set():
            raise


def _read(url: str, params: dict, headers: dict, out: queue.Queue, ready: threading.Event,
          stop: threading.Event) -> None:
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        with client.stream("GET", url, params=params, headers=headers) as response:
            out.put(("status", response.status_code, response.headers.get("content-type")))
            ready.set()
            kind = None
            for line in response.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    out.put((kind, json.loads(line[6:])))


def next_item(out: queue.Queue, timeout: float = 10.0):
    return out.get(timeout=timeout)


def test_stream_delivers_events_after_a_submit(tmp_path):
    app, token = make_app(tmp_path, clock=time.time)
    with live_server(app) as base:
        out: queue.Queue = queue.Queue()
        ready, stop = threading.Event(), threading.Event()
        reader = threading.Thread(target=read_events, args=(f"{base}{API}/stream", {"token": token}, {}, out, ready,
                                                            stop), daemon=True)
        reader.start()
        assert ready.wait(10)
        assert next_item(out) == ("status", 200, "text/event-stream; charset=utf-8")
        for _ in range(50):  # the subscription is registered once the response has started
            if app.state.service.broker.subscribers:
                break
            time.sleep(0.02)
        r = httpx.post(f"{base}{API}/jobs", json=job_body(name="live", duration=0.3), headers=bearer(token))
        assert r.status_code == 201
        job_id = r.json()["id"]
        kinds = []
        while "succeeded" not in kinds:  # the timer thread finishes the job after 0.3 s
            kind, data = next_item(out)
            assert data["job_id"] == job_id and isinstance(data["id"], int)
            kinds.append(kind)
        assert kinds == ["submitted", "started", "succeeded"]
        stop.set()
        # a reconnecting client replays what it missed (Last-Event-ID)
        with httpx.Client(timeout=10) as client:
            with client.stream("GET", f"{base}{API}/stream", headers={**bearer(token), "Last-Event-ID": "1"}) as resp:
                lines = []
                for line in resp.iter_lines():
                    lines.append(line)
                    if line.startswith("data: ") and '"succeeded"' in line:
                        break
        assert [ln[7:] for ln in lines if ln.startswith("event: ")] == ["started", "succeeded"]
        assert "id: 2" in lines
        assert httpx.get(f"{base}{API}/stream").status_code == 401
        assert httpx.get(f"{base}{API}/stream", params={"token": "wrong"}).status_code == 401


def test_concurrent_submissions_never_overcommit(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    app, token = make_app(tmp_path, clock=time.time)
    with live_server(app) as base:
        with httpx.Client(base_url=base, headers=bearer(token), timeout=30) as client:
            def post(i: int) -> dict:
                r = client.post(f"{API}/jobs", json=job_body(name=f"j{i}", gpus=1, memory="1Gi"))
                assert r.status_code == 201, r.text
                return r.json()

            with ThreadPoolExecutor(8) as pool:
                jobs = list(pool.map(post, range(40)))
            assert len({j["id"] for j in jobs}) == 40
            listed = client.get(f"{API}/jobs", params={"limit": 100}).json()
            running = [j for j in listed if j["state"] == "running"]
            assert len(running) == 18 and sum(j["state"] == "pending" for j in listed) == 22  # 18 GPUs
            devices = [(p["node"], d) for j in running for p in j["placement"] for d in p["devices"]]
            assert len(set(devices)) == 18
            snap = client.get(f"{API}/snapshot").json()
            assert snap["gpu_allocation_pct"] == 100 and snap["running"] == 18
