"""Routes of nodes (admin changes, any reader lists): register nodes (a list or a cluster file's
text), cordon/drain/uncordon, mark a GPU device healthy or failed, remove a node."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, HTTPException, Path as PathParam, Response, status

from quasched.model.cluster import PlacementError
from quasched.service.auth import Admin, Reader
from quasched.service.controller import Controller, records_of
from quasched.service.domain import NodeRecord
from quasched.service.routing import API, NodeName, field_error, not_found
from quasched.service.schemas import ClusterYaml, DeviceHealth, NodeIn, NodeOut, NodePatch

if TYPE_CHECKING:
    from quasched.service.runtime import Service


def add_node_routes(app: FastAPI, service: Service) -> None:
    """Register the node routes of ``service`` on ``app``."""
    lock = service.lock

    # ------------------------------------------------------------ nodes
    @app.get(f"{API}/nodes", response_model=list[NodeOut], tags=["nodes"])
    def nodes(who: Reader) -> list[NodeOut]:
        """Every node with its occupancy."""
        with lock:
            return service.nodes_out()

    @app.post(f"{API}/nodes", status_code=201, response_model=list[NodeOut], tags=["nodes"],
              responses={409: {"description": "A node of that name exists."}})
    def add_nodes(body: list[NodeIn] | ClusterYaml, who: Admin) -> list[NodeOut]:
        """Register nodes (admin): a list of nodes, or `{"cluster_yaml": ...}` in the cluster-file format."""
        if isinstance(body, ClusterYaml):
            records = records_from_yaml(body.cluster_yaml)
        else:
            records = []
            for i, node in enumerate(body):
                try:
                    records.append(node.to_record())
                except ValueError as err:
                    raise field_error(f"{i}.gpu_model", str(err).split(": ", 1)[-1]) from None
        if not records:
            raise field_error("nodes", "no nodes given", where="body")
        names = [r.name for r in records]
        if len(set(names)) != len(names):
            raise field_error("name", "node names repeat within the request")
        with lock:
            taken = sorted(set(names) & set(service.records))
            if taken:
                raise HTTPException(status.HTTP_409_CONFLICT, f"nodes exist: {taken[:10]}")

            def add(ctl: Controller, now: float) -> None:
                for record in records:
                    ctl.add_node(record, now)
                    service.store.put_node(record)
                    service.records[record.name] = record

            service.mutate(add)
            return service.nodes_out(set(names))

    def record_of(name: str) -> NodeRecord:
        record = service.records.get(name)
        if record is None:
            raise not_found(f"node {name!r}")
        return record

    @app.patch(f"{API}/nodes/{{name}}", response_model=NodeOut, tags=["nodes"])
    def patch_node(name: NodeName, body: NodePatch, who: Admin) -> NodeOut:
        """Cordon (optionally draining its jobs back to the queue) or uncordon a node (admin)."""
        with lock:
            record = record_of(name)

            def change(ctl: Controller, now: float) -> None:
                if body.cordoned is True:
                    ctl.cordon(name, now, drain=body.drain)
                elif body.cordoned is False:
                    ctl.uncordon(name, now)
                elif body.drain:
                    ctl.drain(name, now)
                if body.cordoned is not None:
                    service.records[name] = updated = replace(record, cordoned=body.cordoned)
                    service.store.put_node(updated)

            service.mutate(change)
            return service.nodes_out({name})[0]

    @app.put(f"{API}/nodes/{{name}}/devices/{{device}}", response_model=NodeOut, tags=["nodes"])
    def device_health(name: NodeName, device: Annotated[int, PathParam(ge=0, le=1024)], body: DeviceHealth,
                      who: Admin) -> NodeOut:
        """Mark a GPU device healthy or failed (admin); jobs on a failed device go back to the queue."""
        with lock:
            record = record_of(name)
            if device >= record.num_gpus:
                raise not_found(f"GPU device {device} on node {name!r} (it has {record.num_gpus})")
            service.set_device_health(name, device, body.healthy)
            return service.nodes_out({name})[0]

    @app.delete(f"{API}/nodes/{{name}}", status_code=204, tags=["nodes"])
    def delete_node(name: NodeName, who: Admin) -> Response:
        """Remove a node (admin); its jobs go back to the queue."""
        with lock:
            record_of(name)

            def remove(ctl: Controller, now: float) -> None:
                ctl.remove_node(name, now)
                service.store.delete_node(name)
                del service.records[name]

            service.mutate(remove)
        return Response(status_code=204)


def records_from_yaml(text: str) -> list[NodeRecord]:
    """Nodes of a cluster file given as text (422 naming ``cluster_yaml`` if it does not load)."""
    from quasched.traces.cluster_file import load_cluster_file

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(text)
        try:
            nodes = load_cluster_file(path)
        except (ValueError, PlacementError) as err:
            raise field_error("cluster_yaml", str(err)) from None
        except Exception as err:  # YAML the parser cannot read at all
            raise field_error("cluster_yaml", f"not a cluster file: {err}") from None
    return records_of(nodes)
