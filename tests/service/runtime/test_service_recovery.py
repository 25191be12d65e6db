"""A database that refuses a change leaves nothing half-applied: memory is rebuilt from the store."""

from __future__ import annotations

from fastapi.testclient import TestClient

from quasched.service.api.app import create_app
from quasched.service.domain import NodeRecord
from quasched.service.loop.controller import nodes_of


def test_failed_save_rebuilds_memory_from_the_store(tmp_path):
    nodes = nodes_of([NodeRecord("n0", 32_000, 128_000, 2, "A100")])
    app = create_app(f"sqlite:///{tmp_path}/q.db", nodes, token_file=tmp_path / "token")
    service = app.state.service
    headers = {"Authorization": f"Bearer {service.new_admin_token}"}
    body = {"name": "a", "team": "default", "cpu": 1, "memory": "1GiB", "gpus": 1}
    with TestClient(app) as client:
        assert client.post("/api/v1/jobs", json=body, headers=headers).status_code == 201
        save = service.store.save

        def refuse(*args):
            raise RuntimeError("disk full")

        service.store.save = refuse
        reply = client.post("/api/v1/jobs", json={**body, "name": "b"}, headers=headers)
        assert reply.status_code == 503 and "nothing was applied" in reply.json()["detail"]
        service.store.save = save
        # the second job is stored (its insert committed) but pending: memory was rebuilt, not ahead
        assert int(service.ctl.cluster.gpu_alloc.sum()) == 1000
        jobs = client.get("/api/v1/jobs", headers=headers).json()
        assert sorted(j["state"] for j in jobs) == ["pending", "running"]


def test_a_refused_node_change_is_neither_stored_nor_kept(tmp_path):
    """A cordon and a queue written with the cycle's changes, in one transaction: refused, the node is schedulable
    and the queue unchanged, in the loop, in the service's records and in the store; accepted, all three agree."""
    nodes = nodes_of([NodeRecord("n0", 32_000, 128_000, 2, "A100"), NodeRecord("n1", 32_000, 128_000, 2, "A100")])
    app = create_app(f"sqlite:///{tmp_path}/q.db", nodes, token_file=tmp_path / "token")
    service = app.state.service
    headers = {"Authorization": f"Bearer {service.new_admin_token}"}
    with TestClient(app) as client:
        save = service.store.save

        def refuse(*args):
            raise RuntimeError("disk full")

        service.store.save = refuse
        reply = client.patch("/api/v1/nodes/n0", json={"cordoned": True}, headers=headers)
        assert reply.status_code == 503 and "nothing was applied" in reply.json()["detail"]
        reply = client.put("/api/v1/queues/vision", json={"quota": {"A100": 2}}, headers=headers)
        assert reply.status_code == 503
        service.store.save = save
        assert not service.records["n0"].cordoned and not service.store.load()[0][0].cordoned
        assert bool(service.ctl.cluster.schedulable[service.ctl.cluster.node("n0")])
        assert [q.name for q in service.store.load()[1]] == ["default"]
        assert "vision" not in {q["name"] for q in service.ctl.queue_status()}

        assert client.patch("/api/v1/nodes/n0", json={"cordoned": True}, headers=headers).status_code == 200
        assert client.delete("/api/v1/nodes/n1", headers=headers).status_code == 204
        stored = service.store.load()[0]
        assert [(r.name, r.cordoned) for r in stored] == [("n0", True)] == [(r.name, r.cordoned)
                                                                             for r in service.records.values()]
        assert not service.ctl.cluster.schedulable[service.ctl.cluster.node("n0")]
