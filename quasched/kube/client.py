"""The API-server side of the extender.

Configuration and listing use the official ``kubernetes`` Python client; the calls on bind's path
(read one pod; the device plugin's read and annotate) and the watches go through one keep-alive
``httpx`` client with the same credentials: about 4 ms per call against about 30 ms through the
``kubernetes`` client's per-call overhead, and watch events decoded with ``json`` alone; bind's
Binding, once per pod at the scheduler's pace, through a ``urllib3`` pool, which takes about half
the CPU of ``httpx`` per call (BENCHMARKS.md, "Kubernetes"). Objects travel as plain dicts (the
API's JSON), which is what :mod:`.convention` and :mod:`.sync` read.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import httpx

from quasched.extras import require
from quasched.kube.gangs import GROUP_LABEL, PODGROUP_APIS, GroupRef

if TYPE_CHECKING:
    import urllib3


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data)


class ApiError(RuntimeError):
    """A refused API-server call: its HTTP status and the server's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def _checked(response: httpx.Response) -> dict[str, Any]:
    """The reply's JSON; :class:`ApiError` with the ``Status`` message when the server refused."""
    return _decoded(response.status_code, response.content, response.reason_phrase)


def _decoded(status: int, content: bytes, reason: str | None) -> dict[str, Any]:
    try:
        body = json.loads(content)
    except ValueError:
        body = {"message": content[:200].decode(errors="replace")}
    if status >= 400:
        raise ApiError(status, str(body.get("message") or reason))
    return body


def tls_context(configuration: Any) -> ssl.SSLContext | None:
    """A ``kubernetes`` client configuration's TLS: its CA and client certificate (None: not verified)."""
    if not configuration.verify_ssl:
        return None
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def http_client(configuration: Any) -> httpx.Client:
    """A keep-alive ``httpx`` client with a ``kubernetes`` client configuration's server, TLS and certificates."""
    return httpx.Client(base_url=configuration.host, verify=tls_context(configuration) or False, timeout=10.0)


def binding_pool(configuration: Any, connections: int = 8) -> urllib3.PoolManager:
    """A keep-alive ``urllib3`` pool with the configuration's TLS, for bind's Binding (concurrent binds share it)."""
    import urllib3  # with the kube extra (the kubernetes client's own HTTP library)

    context = tls_context(configuration)
    if context is None:
        return urllib3.PoolManager(maxsize=connections, cert_reqs="CERT_NONE", timeout=10.0)
    return urllib3.PoolManager(maxsize=connections, ssl_context=context, timeout=10.0)


def unverified_once() -> None:
    """The kubeconfig skips TLS verification: say so once on stderr, instead of urllib3's
    ``InsecureRequestWarning`` on every list and watch call of the ``kubernetes`` client."""
    from urllib3.exceptions import InsecureRequestWarning

    if not any(f[2] is InsecureRequestWarning and f[0] == "ignore" for f in warnings.filters):
        warnings.simplefilter("ignore", InsecureRequestWarning)
        print("quasched kube: the API server's certificate is not verified (insecure-skip-tls-verify in the "
              "kubeconfig)", file=sys.stderr, flush=True)


class KubernetesClient:
    """:class:`~.extender.KubeClient` on a real API server (a kubeconfig file, or in-cluster credentials)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        require("kubernetes", "kube")
        from kubernetes import client, config

        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig, context=context)
        self.api = client.CoreV1Api()
        self.configuration = client.Configuration.get_default_copy()
        if not self.configuration.verify_ssl:
            unverified_once()
        self.http = http_client(self.configuration)
        self.bindings = binding_pool(self.configuration)
        self._eviction_api: str | None = None

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        """The bearer token, if any (asked each call: in-cluster tokens are refreshed by the config's hook)."""
        token = self.configuration.auth_settings().get("BearerToken", {}).get("value")
        headers = {"Authorization": token} if token else {}
        return headers | ({"Content-Type": content_type} if content_type else {})

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return _checked(self.http.get(f"/api/v1/namespaces/{namespace}/pods/{name}", headers=self._headers()))

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None,
                params: Mapping[str, str] | None = None, timeout_s: float | None = None) -> dict[str, Any]:
        """One call of the API server (``body`` sent as JSON): the reply's JSON; :class:`ApiError` when the server
        refused, ``httpx.HTTPError`` when it could not be reached in ``timeout_s`` (default: the client's)."""
        content = None if body is None else json.dumps(body)
        timeout: Any = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
        return _checked(self.http.request(method, path, content=content, params=dict(params or {}), timeout=timeout,
                                          headers=self._headers("application/json" if body is not None else None)))

    def pod_log(self, namespace: str, name: str, tail: int | None = None, timeout_s: float | None = None) -> str:
        """The pod's (first container's) log, its last ``tail`` lines if given; :class:`ApiError` when refused."""
        params = {} if tail is None else {"tailLines": str(tail)}
        timeout: Any = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
        response = self.http.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log", params=params, timeout=timeout,
                                 headers=self._headers())
        if response.status_code >= 400:
            _checked(response)  # raises with the Status message
        return response.text

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the pod (the device plugin's ``assigned`` mark)."""
        self._annotate(f"/api/v1/namespaces/{namespace}/pods/{name}", annotations)

    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the node (the device plugin's GPU state)."""
        self._annotate(f"/api/v1/nodes/{name}", annotations)

    def _annotate(self, path: str, annotations: Mapping[str, str]) -> None:
        body = json.dumps({"metadata": {"annotations": dict(annotations)}})
        _checked(self.http.patch(path, content=body, headers=self._headers("application/merge-patch+json")))

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        """Create the pod's Binding to ``node``; the API server merges ``annotations`` into the pod in the same
        update that sets ``spec.nodeName``. ``uid`` is a precondition from 1.21 on (1.20 ignores it)."""
        metadata = {"name": name, "namespace": namespace} | ({"uid": uid} if uid else {}) | (
            {"annotations": dict(annotations)} if annotations else {})
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        reply = self.bindings.request("POST", f"{self.configuration.host}/api/v1/namespaces/{namespace}/pods/{name}"
                                             "/binding", body=json.dumps(body).encode(),
                                      headers=self._headers("application/json"), retries=False)
        _decoded(reply.status, reply.data, reply.reason)

    def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool = False) -> None:
        """Evict the pod (the Eviction API: PodDisruptionBudgets are checked, the kubelet grants the pod its grace
        period); ``uid`` is a precondition. :class:`ApiError` 429 when a budget refuses, 404 when it is gone."""
        options: dict[str, Any] = {"preconditions": {"uid": uid}} | ({"dryRun": ["All"]} if dry_run else {})
        body = {"apiVersion": self._eviction_version(), "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}, "deleteOptions": options}
        _checked(self.http.post(f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", content=json.dumps(body),
                                headers=self._headers("application/json")))

    def _eviction_version(self) -> str:
        """The Eviction version the API server takes: ``pods/eviction``'s group and version in ``/api/v1``'s
        resources (``policy/v1`` from 1.22, ``policy/v1beta1`` before; asked until an answer is read)."""
        if self._eviction_api is None:
            reply = _checked(self.http.get("/api/v1", headers=self._headers()))
            found = [r for r in reply.get("resources") or [] if r.get("name") == "pods/eviction"]
            group, version = (found[0].get("group"), found[0].get("version")) if found else (None, None)
            self._eviction_api = f"{group}/{version}" if group and version else "policy/v1beta1"
        return self._eviction_api

    def get_pod_group(self, ref: GroupRef) -> dict[str, Any]:
        """The group's PodGroup object (:class:`LookupError` naming it when the API server has none)."""
        try:  # resourceVersion=0: from the API server's watch cache, no read of etcd (filter asks often)
            return _checked(self.http.get(ref.path, params={"resourceVersion": "0"}, headers=self._headers()))
        except ApiError as err:
            if err.status == 404:
                raise LookupError(f"no PodGroup {ref.key} ({PODGROUP_APIS[ref.convention]})") from None
            raise

    def group_pods(self, ref: GroupRef) -> list[dict[str, Any]]:
        """The pods of the group (its namespace's pods carrying its label or annotation)."""
        params = {"resourceVersion": "0"} | (  # (from the watch cache, as above)
            {"labelSelector": f"{GROUP_LABEL}={ref.name}"} if ref.convention == "coscheduling" else {})
        reply = _checked(self.http.get(f"/api/v1/namespaces/{ref.namespace}/pods", params=params,
                                       headers=self._headers()))
        return [pod for pod in reply.get("items") or [] if ref.member(pod)]

    def node_pods(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to ``node`` (the device plugin's view)."""
        reply = _checked(self.http.get("/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"},
                                       headers=self._headers()))
        return list(reply.get("items") or [])

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return _checked(self.http.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
                                      headers=self._headers()))

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        data = _json(self.api.list_node(_preload_content=False))
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        data = _json(self.api.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", _preload_content=False))
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, path: str, resource_version: str, timeout_s: float, **params: str) -> Iterator[tuple[str, Any]]:
        """A watch as (type, object) pairs; each event line decoded with ``json`` only (the ``kubernetes``
        client's watch builds model objects of every event, a few ms of CPU per pod at scale)."""
        query = {"watch": "1", "timeoutSeconds": str(max(1, int(timeout_s))), "allowWatchBookmarks": "true", **params}
        if resource_version:
            query["resourceVersion"] = resource_version
        with self.http.stream("GET", path, params=query, headers=self._headers(),
                              timeout=httpx.Timeout(10.0, read=timeout_s + 30)) as response:
            if response.status_code >= 400:
                response.read()
                _checked(response)
            for line in response.iter_lines():
                if line:
                    event = json.loads(line)
                    yield str(event.get("type")), event.get("object") or {}

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Iterator[tuple[str, Any]]:
        return self._watch("/api/v1/nodes", resource_version, timeout_s)

    def watch_pods(self, resource_version: str, timeout_s: float) -> Iterator[tuple[str, Any]]:
        return self._watch("/api/v1/pods", resource_version, timeout_s, fieldSelector="spec.nodeName!=")
