"""A cluster written by hand: a YAML file of node pools (docs/file-formats.md).

The document is composed (not loaded) so every value keeps its line; problems
are :class:`TraceError`\\ s naming the file, the line, the field path (e.g.
``pools[1].gpu.count``) and the fix. Pool ``p`` of ``count`` nodes gives
nodes ``p-0`` .. ``p-<count-1>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import numpy as np
import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from quasched.model.nodes import MAX_NODE_GPUS, MODEL_NAME, MODEL_NAME_HINT, NodeSpec
from quasched.model.resources import RDMA_CAPACITY, RESOURCES, UNLIMITED, Resource, ResourceRegistry
from quasched.traces.errors import TraceError, require_file
from quasched.traces.units import parse_cpu, parse_memory

TOP_KEYS = ("name", "pools")
POOL_KEYS = ("name", "count", "cpu", "memory", "gpu", "rdma", "disk", "labels")
POOL_REQUIRED = ("name", "count", "cpu", "memory")
GPU_KEYS = ("model", "count")
MAX_NODES = 1_000_000  # per pool: a typo such as 1e11 would otherwise exhaust memory building the nodes
EXAMPLE = "pools:\n  - {name: a100, count: 16, cpu: 96, memory: 768Gi, gpu: {model: A100, count: 8}}"


def extra_resources(resources: ResourceRegistry) -> list[Resource]:
    """Resources of ``resources`` registered beyond the built-in ones (:data:`RESOURCES`)."""
    return [r for r in resources if r.name not in RESOURCES.names]


def load_cluster_file(path: str | Path, resources: ResourceRegistry = RESOURCES) -> NodeSpec:
    """Nodes of a YAML cluster file; see docs/file-formats.md for the format.

    Every resource of ``resources`` registered beyond the built-in ones is an
    optional integer pool key (a pool without it gets the resource's default
    capacity); their capacities go into ``NodeSpec.extra``.
    """
    extras = extra_resources(resources)
    clash = [r.name for r in extras if r.name in POOL_KEYS or r.name.startswith("has_")]
    if clash:
        raise ValueError(f"resources {clash} are named like pool keys; rename them")
    doc = _Document(Path(path))
    top = doc.mapping(doc.root, "", TOP_KEYS, ("pools",))
    title = doc.text(top["name"], "name") if "name" in top else doc.path.name
    if not isinstance(top["pools"], SequenceNode) or not top["pools"].value:
        doc.fail(top["pools"], "pools", f"must be a non-empty list of pools, e.g.\n{EXAMPLE}")
    pools: list[dict[str, Any]] = []
    for i, node in enumerate(top["pools"].value):
        pool = _pool(doc, node, f"pools[{i}]", extras)
        for j, other in enumerate(pools):
            if other["name"] == pool["name"]:
                doc.fail(pool["node"], f"pools[{i}].name",
                         f"{pool['name']!r} already names pools[{j}]; give each pool its own name")
        pools.append(pool)
    counts = [pool["count"] for pool in pools]

    def column(key: str, dtype: Any) -> np.ndarray:
        return np.repeat(np.array([pool[key] for pool in pools], dtype=dtype), counts)

    return NodeSpec(
        name=np.array([f"{pool['name']}-{k}" for pool in pools for k in range(pool["count"])], dtype=object),
        cpu_milli=column("cpu", np.int64),
        memory_mib=column("memory", np.int64),
        num_gpus=column("gpus", np.int64),
        gpu_model=column("model", object),
        rdma=column("rdma", np.int64),
        disk_mib=column("disk", np.int64) if any(pool["has_disk"] for pool in pools) else None,
        labels=_objects([dict(pool["labels"]) for pool in pools for _ in range(pool["count"])]),
        extra={r.name: column(r.name, np.int64) for r in extras if any(pool["has_" + r.name] for pool in pools)},
        source=title,
    )


def _pool(doc: "_Document", node: Node, field: str, extras: Sequence[Resource] = ()) -> dict[str, Any]:
    """One pool's values (``node``: the node of its name, for errors about it)."""
    pool = doc.mapping(node, field, (*POOL_KEYS, *(r.name for r in extras)), POOL_REQUIRED)
    gpu = doc.mapping(pool["gpu"], f"{field}.gpu", GPU_KEYS, GPU_KEYS) if "gpu" in pool else {}
    values: dict[str, Any] = {}
    for r in extras:
        values["has_" + r.name] = r.name in pool
        if r.name in pool:
            values[r.name] = doc.integer(pool[r.name], f"{field}.{r.name}", 0, f"a whole number of {r.unit}, at least 0")
        elif r.default_capacity is not None:
            values[r.name] = r.default_capacity
        else:
            doc.fail(node, f"{field}.{r.name}", f"required key is missing; give each pool its {r.name} ({r.unit})")
    return {
        **values,
        "node": pool["name"],
        "name": doc.text(pool["name"], f"{field}.name", MODEL_NAME.fullmatch, MODEL_NAME_HINT),
        "count": doc.integer(pool["count"], f"{field}.count", 1, f"a whole number of nodes, 1 to {MAX_NODES:,}",
                             MAX_NODES),
        "cpu": doc.amount(pool["cpu"], f"{field}.cpu", parse_cpu),
        "memory": doc.amount(pool["memory"], f"{field}.memory", parse_memory),
        "model": doc.text(gpu["model"], f"{field}.gpu.model", MODEL_NAME.fullmatch, MODEL_NAME_HINT) if gpu else "",
        "gpus": doc.integer(gpu["count"], f"{field}.gpu.count", 1, f"a whole number of GPUs, 1 to {MAX_NODE_GPUS} "
                            "(omit gpu for CPU-only nodes)", MAX_NODE_GPUS) if gpu else 0,
        "rdma": doc.integer(pool["rdma"], f"{field}.rdma", 0, f"a whole percentage of one NIC, 0 to {RDMA_CAPACITY}",
                            RDMA_CAPACITY) if "rdma" in pool else RDMA_CAPACITY,
        "has_disk": "disk" in pool,
        "disk": doc.amount(pool["disk"], f"{field}.disk", parse_memory) if "disk" in pool else UNLIMITED,
        "labels": doc.labels(pool["labels"], f"{field}.labels") if "labels" in pool else {},
    }


def _objects(values: list[Any]) -> np.ndarray:
    """A 1-D object array holding ``values`` as they are (dicts included)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


class _Document:
    """A composed YAML file and checked readers of its nodes."""

    def __init__(self, path: Path) -> None:
        require_file(path)
        self.path = path
        try:
            root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            raise TraceError(path, f"invalid YAML: {exc.problem or exc.context}; fix the syntax",
                             mark.line + 1 if mark else None) from None
        except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
            raise TraceError(path, f"cannot read the file: {exc}") from None
        if root is None:
            raise TraceError(path, f"the file is empty; describe the cluster, e.g.\n{EXAMPLE}")
        self.root = root
        self._constructor = SafeConstructor()

    def fail(self, node: Node, field: str, message: str) -> NoReturn:
        raise TraceError(self.path, message, node.start_mark.line + 1, field or None)

    def mapping(
        self, node: Node, field: str, allowed: tuple[str, ...] | None, required: tuple[str, ...] = ()
    ) -> dict[str, Node]:
        """The ``key: value`` nodes of a mapping with only ``allowed`` keys (None: any) and every ``required`` one."""
        if not isinstance(node, MappingNode):
            keys = f" ({', '.join(allowed)})" if allowed else ""
            self.fail(node, field, f"{field or 'the file'} must be a mapping of key: value{keys}")
        found: dict[str, Node] = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode):
                self.fail(key, field, "a key must be plain text, not a list or mapping")
            path = f"{field}.{key.value}" if field else str(key.value)
            if allowed is not None and key.value not in allowed:
                self.fail(key, path, f"unknown key; allowed keys: {', '.join(allowed)}")
            if key.value in found:
                self.fail(key, path, "duplicate key; give each key once")
            found[key.value] = value
        for key in required:
            if key not in found:
                self.fail(node, f"{field}.{key}" if field else key,
                          f"required key is missing; add it (required: {', '.join(required)})")
        return found

    def scalar(self, node: Node, field: str) -> Any:
        if not isinstance(node, ScalarNode):
            self.fail(node, field, "must be a single value, not a list or mapping")
        return self._constructor.construct_object(node)

    def text(self, node: Node, field: str, valid: Callable[[str], Any] = bool, hint: str = "") -> str:
        value = self.scalar(node, field)
        if not isinstance(value, str) or not valid(value):
            self.fail(node, field, f"{value!r} is not a valid name; {hint or 'write some text'}")
        return value

    def integer(self, node: Node, field: str, minimum: int, what: str, maximum: int | None = None) -> int:
        value = self.scalar(node, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
                maximum is not None and value > maximum):
            self.fail(node, field, f"{value!r} is not allowed; write {what}")
        return value

    def amount(self, node: Node, field: str, parse: Callable[[Any], int]) -> int:
        try:
            return parse(self.scalar(node, field))
        except ValueError as exc:
            self.fail(node, field, str(exc))

    def labels(self, node: Node, field: str) -> dict[str, str]:
        labels = {}
        for key, value in self.mapping(node, field, None).items():
            text = self.scalar(value, f"{field}.{key}")
            if not isinstance(text, str):
                self.fail(value, f"{field}.{key}", f"{text!r} is not text; quote it: {key}: \"{text}\"")
            labels[key] = text
        return labels
