"""The API-server side of the extender, with the official ``kubernetes`` Python client.

Objects travel as plain dicts (the API's JSON: ``_preload_content=False``), which is
what :mod:`.convention` and :mod:`.sync` read; the client's model classes are not
used, which also avoids its known failure to deserialize the reply of
``create_namespaced_pod_binding``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Mapping


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data)  # type: ignore[no-any-return]


class KubernetesClient:
    """:class:`~.extender.KubeClient` on a real API server (a kubeconfig file, or in-cluster credentials)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        from kubernetes import client, config

        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig, context=context)
        self.api = client.CoreV1Api()
        self._client = client

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return _json(self.api.read_namespaced_pod(name, namespace, _preload_content=False))

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        self.api.patch_namespaced_pod(name, namespace, body, _preload_content=False)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        c = self._client
        body = c.V1Binding(metadata=c.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
                           target=c.V1ObjectReference(api_version="v1", kind="Node", name=node))
        self.api.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)  # pods/{name}/binding

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        data = _json(self.api.list_node(_preload_content=False))
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        data = _json(self.api.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", _preload_content=False))
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, list_call: Any, resource_version: str, timeout_s: float, **kw: Any) -> Iterator[tuple[str, Any]]:
        from kubernetes import watch

        stream = watch.Watch().stream(list_call, resource_version=resource_version or None,
                                      timeout_seconds=max(1, int(timeout_s)), allow_watch_bookmarks=True, **kw)
        for event in stream:
            yield str(event.get("type")), event.get("raw_object") or {}

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Iterator[tuple[str, Any]]:
        return self._watch(self.api.list_node, resource_version, timeout_s)

    def watch_pods(self, resource_version: str, timeout_s: float) -> Iterator[tuple[str, Any]]:
        return self._watch(self.api.list_pod_for_all_namespaces, resource_version, timeout_s,
                           field_selector="spec.nodeName!=")
