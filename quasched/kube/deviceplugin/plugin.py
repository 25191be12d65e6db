"""The device plugin's gRPC side: :class:`SharesPlugin` answers the kubelet's ``ListAndWatch`` and
``Allocate``; :func:`serve` listens on ``<plugin dir>/quasched-gpu-shares.sock``, registers with the
kubelet's ``kubelet.sock`` and does both again whenever the kubelet restarts (it removes every socket
in the directory and creates ``kubelet.sock`` anew)."""

from __future__ import annotations

import os
import threading
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

from quasched.extras import require
from quasched.kube.convention import ASSIGNED_ANNOTATION, GPU_RESOURCE, pod_key
from quasched.kube.deviceplugin import api_pb2 as api
from quasched.kube.deviceplugin.allocate import AllocateError, container_env, resolve
from quasched.kube.deviceplugin.gpus import NodeGpus, device_ids

API_VERSION = "v1beta1"
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
SOCKET = "quasched-gpu-shares.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
#: how often serve() checks that the kubelet and this plugin's socket are still the ones registered
POLL_S = 1.0


class NodePods(Protocol):
    """What the plugin needs from the API server (:class:`~quasched.kube.client.KubernetesClient`)."""

    def node_pods(self, node: str) -> list[dict[str, Any]]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...


class SharesPlugin:
    """The ``v1beta1.DevicePlugin`` service of one node (registered on a gRPC server by :func:`serve`)."""

    def __init__(self, node: str, gpus: NodeGpus, pods: NodePods, log: Callable[[str], None] = print) -> None:
        self.node, self.gpus, self.pods, self.log = node, gpus, pods, log
        self.healthy = [True] * len(gpus.uuids)
        self._changed = threading.Condition()
        self._version = 0
        self._allocating = threading.Lock()
        self.stopped = threading.Event()

    # ------------------------------------------------------------ health
    def set_health(self, device: int, healthy: bool) -> None:
        """Mark one GPU (all its shares) healthy or not; open ListAndWatch streams send the new list."""
        with self._changed:
            if self.healthy[device] != healthy:
                self.healthy[device] = healthy
                self._version += 1
                self._changed.notify_all()
        self.log(f"GPU {device} ({self.gpus.uuids[device]}) {'healthy' if healthy else 'unhealthy'}")

    def devices(self) -> list[api.Device]:
        return [api.Device(ID=i, health=HEALTHY if ok else UNHEALTHY)
                for gpu, ok in zip(self.gpus.uuids, self.healthy) for i in device_ids(gpu)]

    # ------------------------------------------------------------ the service
    def GetDevicePluginOptions(self, request: api.Empty, context: Any) -> api.DevicePluginOptions:  # noqa: N802
        return api.DevicePluginOptions()

    def ListAndWatch(self, request: api.Empty, context: Any) -> Iterator[api.ListAndWatchResponse]:  # noqa: N802
        seen = -1
        while not self.stopped.is_set() and context.is_active():
            with self._changed:
                if seen == self._version:
                    self._changed.wait(timeout=POLL_S)
                    continue
                seen = self._version
                devices = self.devices()
            yield api.ListAndWatchResponse(devices=devices)

    def Allocate(self, request: api.AllocateRequest, context: Any) -> api.AllocateResponse:  # noqa: N802
        try:
            return api.AllocateResponse(container_responses=[
                api.ContainerAllocateResponse(envs=self.allocate(len(c.devicesIDs)))
                for c in request.container_requests])
        except AllocateError as err:
            self.log(f"Allocate refused: {err}")
            grpc = require("grpc", "kube")
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"quasched device plugin: {err}")
            raise  # abort raises; mypy does not know

    def allocate(self, shares: int) -> dict[str, str]:
        """The environment for one container asking ``shares``: resolve its pod, mark it assigned."""
        with self._allocating:  # one pod at a time, so two Allocates never resolve the same pod
            try:
                pods = self.pods.node_pods(self.node)
            except Exception as err:
                raise AllocateError(f"cannot list the pods of node {self.node}: {err}") from None
            pod = resolve(pods, shares)
            env = container_env(pod, self.gpus)
            namespace, name, _ = pod_key(pod)
            try:
                self.pods.annotate_pod(namespace, name, {ASSIGNED_ANNOTATION: "true"})
            except Exception as err:
                raise AllocateError(f"cannot mark pod {namespace}/{name} assigned: {err}") from None
        self.log(f"Allocate {shares} shares -> {namespace}/{name}: {env['NVIDIA_VISIBLE_DEVICES']}")
        return env


def register(plugin_dir: Path, timeout_s: float = 5.0) -> None:
    """Announce the plugin's socket to the kubelet (grpc's errors when the kubelet is not there)."""
    grpc = require("grpc", "kube")
    from quasched.kube.deviceplugin import api_pb2_grpc

    with grpc.insecure_channel(f"unix://{plugin_dir / KUBELET_SOCKET}") as channel:
        api_pb2_grpc.RegistrationStub(channel).Register(api.RegisterRequest(
            version=API_VERSION, endpoint=SOCKET, resource_name=GPU_RESOURCE, options=api.DevicePluginOptions()),
            timeout=timeout_s)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


def serve(plugin: SharesPlugin, plugin_dir: Path = PLUGIN_DIR) -> None:
    """Serve ``plugin`` until ``plugin.stopped`` is set: listen, register, and start over when the kubelet's
    socket is re-created or this plugin's socket is removed (a kubelet restart)."""
    grpc = require("grpc", "kube")
    from quasched.kube.deviceplugin import api_pb2_grpc

    sock = plugin_dir / SOCKET
    while not plugin.stopped.is_set():
        kubelet = _identity(plugin_dir / KUBELET_SOCKET)
        if kubelet is None:
            plugin.stopped.wait(POLL_S)
            continue
        sock.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_DevicePluginServicer_to_server(plugin, server)  # type: ignore[arg-type]
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        try:
            register(plugin_dir)
            gpus = len(plugin.gpus.uuids)
            plugin.log(f"registered {GPU_RESOURCE} ({gpus} GPU{'s' * (gpus != 1)}) with the kubelet at {plugin_dir}")
            while not plugin.stopped.wait(POLL_S):
                if _identity(plugin_dir / KUBELET_SOCKET) != kubelet or not sock.exists():
                    plugin.log("kubelet restarted: registering again")
                    break
        except grpc.RpcError as err:
            plugin.log(f"registration failed ({err.code().name}): retrying")
            plugin.stopped.wait(POLL_S)
        finally:
            server.stop(grace=1).wait()
