"""The wire format of kube-scheduler's extender calls (``k8s.io/kube-scheduler/extender/v1``).

The Go structs have no json tags, so kube-scheduler sends PascalCase keys and
decodes replies case-insensitively; the embedded ``v1.Pod``/``v1.Node`` objects
are camelCase. :func:`canonical` rewrites every key it knows, at any depth and
in any letter case, to its canonical spelling, and leaves the keys of data maps
(labels, annotations, resource lists, node selectors) as they are.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

#: structural keys we read, in their canonical spelling
KNOWN = (
    # extender/v1
    "Pod", "Nodes", "NodeNames", "PodName", "PodNamespace", "PodUID", "Node",
    "NodeNameToVictims", "NodeNameToMetaVictims",
    # v1 objects (only what quasched reads)
    "apiVersion", "kind", "metadata", "name", "namespace", "uid", "labels", "annotations", "resourceVersion",
    "deletionTimestamp", "spec", "status", "items", "containers", "initContainers", "resources", "requests",
    "limits", "nodeSelector", "nodeName", "schedulerName", "phase", "allocatable", "capacity", "conditions",
    "type", "unschedulable",
)
CANONICAL = {k.lower(): k for k in KNOWN}
#: maps whose keys are data, not field names
DATA_MAPS = frozenset({"labels", "annotations", "requests", "limits", "nodeSelector", "allocatable", "capacity"})
MAX_BODY = 16 << 20


class BadRequest(ValueError):
    """A body the extender cannot read: answered 400 with ``{"Error": message}``."""


def canonical(value: Any, depth: int = 0) -> Any:
    """``value`` with known keys in canonical spelling (recursively; data maps untouched)."""
    if depth > 64:
        raise BadRequest("body nested too deeply")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = CANONICAL.get(key.lower(), key) if isinstance(key, str) else key
            out[name] = item if name in DATA_MAPS and isinstance(item, dict) else canonical(item, depth + 1)
        return out
    if isinstance(value, list):
        return [canonical(item, depth + 1) if isinstance(item, (dict, list)) else item for item in value]
    return value


def parse(body: bytes) -> dict[str, Any]:
    """A JSON object body in canonical keys; :class:`BadRequest` otherwise."""
    if len(body) > MAX_BODY:
        raise BadRequest(f"body larger than {MAX_BODY} bytes")
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequest(f"body is not JSON: {err}") from None
    except RecursionError:
        raise BadRequest("body nested too deeply") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    return canonical(data)


def object_of(args: Mapping[str, Any], key: str, required: bool = True) -> dict[str, Any] | None:
    """``args[key]`` as a JSON object (:class:`BadRequest` if it is not one; ``None`` if absent and optional)."""
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"{key}: an object is required")
    return value


def text_of(args: Mapping[str, Any], key: str, required: bool = True) -> str:
    """``args[key]`` as a non-empty string of at most 253 characters (:class:`BadRequest` otherwise)."""
    value = args.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value or len(value) > 253:
        raise BadRequest(f"{key}: a non-empty string (at most 253 characters) is required")
    return value


def node_names(args: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
    """The candidate node names (``NodeNames``, else the names of ``Nodes.items``) and the node objects if sent."""
    names = args.get("NodeNames")
    nodes = args.get("Nodes")
    items: list[dict[str, Any]] | None = None
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items", []), (list, type(None))):
            raise BadRequest("Nodes: a v1.NodeList object or null is required")
        items = [n for n in nodes.get("items") or []]
        if not all(isinstance(n, dict) for n in items):
            raise BadRequest("Nodes.items: node objects are required")
    if names is not None:
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise BadRequest("NodeNames: a list of strings or null is required")
        return list(names), items
    if items is None:
        return [], None
    out = []
    for node in items:
        name = (node.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            raise BadRequest("Nodes.items[].metadata.name: a string is required")
        out.append(name)
    return out, items
