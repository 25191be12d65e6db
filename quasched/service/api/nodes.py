"""Routes of nodes (admin changes, any reader lists): register nodes (a list or a cluster file's
text; bounded, stored in one transaction outside the service's lock), cordon/drain/uncordon, mark a GPU device
healthy or failed, remove a node."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import yaml
from fastapi import FastAPI, HTTPException, Path as PathParam, Response, status

from quasched.model.cluster import PlacementError
from quasched.service.api.routing import API, NodeName, field_error, not_found
from quasched.service.domain import Event, NodeRecord
from quasched.service.loop.controller import Controller, nodes_of, records_of
from quasched.service.runtime.auth import Admin, Reader
from quasched.service.runtime.schemas import ClusterYaml, DeviceHealth, NodeIn, NodeOut, NodePatch

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

#: most nodes one registration may carry (413 beyond), and most the cluster may reach through the API (422)
MAX_NODES_PER_REQUEST = 10_000
MAX_CLUSTER_NODES = 100_000


def add_node_routes(app: FastAPI, service: Service) -> None:
    """Register the node routes of ``service`` on ``app``."""
    lock = service.lock
    importing = threading.Lock()

    # ------------------------------------------------------------ nodes
    @app.get(f"{API}/nodes", response_model=list[NodeOut], tags=["nodes"])
    def nodes(who: Reader) -> list[NodeOut]:
        """Every node with its occupancy."""
        with lock:
            return service.nodes_out()

    @app.post(f"{API}/nodes", status_code=201, response_model=list[NodeOut], tags=["nodes"], responses={
        409: {"description": "A node of that name exists."},
        413: {"description": f"More than {MAX_NODES_PER_REQUEST:,} nodes in one request."},
        422: {"description": f"Invalid nodes, or the cluster would have more than {MAX_CLUSTER_NODES:,}."}})
    def add_nodes(body: list[NodeIn] | ClusterYaml, who: Admin) -> list[NodeOut]:
        """Register nodes (admin): a list of nodes, or `{"cluster_yaml": ...}` in the cluster-file format; at most
        10,000 per request and 100,000 in the cluster. They are stored in one transaction (all or none) and
        answered once the loop has them; the other API calls are answered meanwhile."""
        records = requested(body)
        names = [r.name for r in records]
        if len(set(names)) != len(names):
            raise field_error("name", "node names repeat within the request")
        with importing:  # one registration at a time, so that the cluster's limit holds
            with lock:
                if not service.leading:
                    raise service.refusal()
                taken = sorted(set(names) & set(service.records))
                if taken:
                    raise HTTPException(status.HTTP_409_CONFLICT, f"nodes exist: {taken[:10]}")
                total = len(service.records) + len(records)
                if total > MAX_CLUSTER_NODES:
                    raise field_error("nodes", f"the cluster would have {total:,} nodes; it has at most "
                                               f"{MAX_CLUSTER_NODES:,}", where="body")
            now = service.clock()
            added = [Event(now, "node-added", node=name) for name in names]
            try:  # outside the lock: the API answers while the transaction runs
                service.store.put_nodes(records, added)
            except ValueError as err:
                raise HTTPException(status.HTTP_409_CONFLICT, str(err)) from None

            def add(ctl: Controller, now: float) -> None:
                ctl.add_nodes(nodes_of(records))
                service.records.update((r.name, r) for r in records)

            with lock:
                service.broker.publish(list(added))
                if service.leading:  # (one that stepped down meanwhile reads them from the store)
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
                    service.keep_node(replace(record, cordoned=body.cordoned))

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
                service.drop_node(name)

            service.mutate(remove)
        return Response(status_code=204)


def requested(body: list[NodeIn] | ClusterYaml) -> list[NodeRecord]:
    """The nodes of a registration's body: 413 naming the field above :data:`MAX_NODES_PER_REQUEST`, 422 naming
    it if there are none or one does not convert."""
    if isinstance(body, ClusterYaml):
        count = pool_nodes(body.cluster_yaml)  # before building them
        if count > MAX_NODES_PER_REQUEST:
            raise too_many("cluster_yaml", count)
        return records_from_yaml(body.cluster_yaml)
    if len(body) > MAX_NODES_PER_REQUEST:
        raise too_many("nodes", len(body))
    if not body:
        raise field_error("nodes", "no nodes given", where="body")
    records = []
    for i, node in enumerate(body):
        try:
            records.append(node.to_record())
        except ValueError as err:
            raise field_error(f"{i}.gpu_model", str(err).split(": ", 1)[-1]) from None
    return records


def too_many(field: str, count: int) -> HTTPException:
    """The 413 of a registration of ``count`` nodes, naming ``field`` and the limit."""
    return field_error(field, f"{count:,} nodes in one request; at most {MAX_NODES_PER_REQUEST:,} (register "
                              "them in several requests)", code=status.HTTP_413_CONTENT_TOO_LARGE)


def pool_nodes(text: str) -> int:
    """The nodes a cluster file's pools add up to, read without building them (0 when it does not say: the
    cluster file's own load reports the problem)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return 0
    pools = doc.get("pools") if isinstance(doc, dict) else None
    if not isinstance(pools, list):
        return 0
    return sum(p["count"] for p in pools if isinstance(p, dict) and type(p.get("count")) is int)


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
