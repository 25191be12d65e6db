"""A database that refuses a change leaves nothing half-applied: memory is rebuilt from the store."""

from __future__ import annotations

from fastapi.testclient import TestClient

from quasched.service.api.app import create_app
from quasched.service.loop.controller import nodes_of
from quasched.service.domain import NodeRecord


def test_failed_save_rebuilds_memory_from_the_store(tmp_path):
    nodes = nodes_of([NodeRecord("n0", 32_000, 128_000, 2, "A100")])
    app = create_app(f"sqlite:///{tmp_path}/q.db", nodes, token_file=tmp_path / "token")
    service = app.state.service
    headers = {"Authorization": f"Bearer {service.new_admin_token}"}
    body = {"name": "a", "team": "default", "cpu": 1, "memory": "1GiB", "gpus": 1}
    with TestClient(app) as client:
        assert client.post("/api/v1/jobs", json=body, headers=headers).status_code == 201
        save = service.store.save

        def refuse(jobs, events):
            raise RuntimeError("disk full")

        service.store.save = refuse
        reply = client.post("/api/v1/jobs", json={**body, "name": "b"}, headers=headers)
        assert reply.status_code == 503 and "nothing was applied" in reply.json()["detail"]
        service.store.save = save
        # the second job is stored (its insert committed) but pending: memory was rebuilt, not ahead
        assert int(service.ctl.cluster.gpu_alloc.sum()) == 1000
        jobs = client.get("/api/v1/jobs", headers=headers).json()
        assert sorted(j["state"] for j in jobs) == ["pending", "running"]
