"""quasched's device plugin: which pod an Allocate is for, the environment it gets, and the gRPC service
against a stand-in kubelet on a unix socket (registration, re-registration after a kubelet restart,
ListAndWatch with health, Allocate and its refusal). The real kubelet runs it in tests/kube/test_kube_kubelet.py."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any, Mapping

import pytest
from extra import needs

grpc = needs("grpc", "kube")
needs("google.protobuf", "kube")

from quasched.kube.convention import bind_annotations  # noqa: E402
from quasched.kube.deviceplugin import api_pb2_grpc  # noqa: E402
from quasched.kube.deviceplugin import api_pb2 as api  # noqa: E402
from quasched.kube.deviceplugin.allocate import AllocateError, container_env, resolve  # noqa: E402
from quasched.kube.deviceplugin.gpus import fake_gpus  # noqa: E402
from quasched.kube.deviceplugin.plugin import KUBELET_SOCKET, SOCKET, SharesPlugin, serve  # noqa: E402

GPUS = fake_gpus("node-a", 4, "T4", memory_mib=16000)


def pod(name: str, shares: int, devices: str = "0", assumed: int | None = 1, assigned: str = "false",
        **meta: Any) -> dict[str, Any]:
    annotations = bind_annotations(tuple(int(d) for d in devices.split(",")), assumed or 0) if assumed else {}
    if assumed:
        annotations["quasched.io/assigned"] = assigned
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "annotations": annotations, **meta},
            "spec": {"nodeName": "node-a", "containers": [
                {"name": "c", "resources": {"limits": {"quasched.io/gpu-shares": str(shares)}}}]},
            "status": {"phase": "Pending"}}


# ---------------------------------------------------------------- which pod, which environment
def test_resolve_takes_the_oldest_waiting_pod_with_that_many_shares():
    pods = [pod("late", 50, assumed=30), pod("early", 50, assumed=20), pod("other-size", 25, assumed=1),
            pod("done", 50, assumed=5, assigned="true"), pod("no-mark", 50, assumed=None),
            pod("going", 50, assumed=2, deletionTimestamp="2026-01-01T00:00:00Z")]
    assert resolve(pods, 50)["metadata"]["name"] == "early"
    assert resolve(pods, 25)["metadata"]["name"] == "other-size"
    with pytest.raises(AllocateError, match="no pod on this node waits for 100 shares"):
        resolve(pods, 100)


def test_whole_gpus_see_exactly_the_booked_devices():
    env = container_env(pod("w", 200, devices="3,1"), GPUS)
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == f"{GPUS.uuids[3]},{GPUS.uuids[1]}"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env and env["QUASCHED_GPU_SHARES"] == "200"


def test_a_share_gets_its_device_thread_percentage_and_memory():
    env = container_env(pod("s", 25, devices="2"), GPUS)
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPUS.uuids[2]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25" and env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4000M"


@pytest.mark.parametrize("devices, says", [("4", "names device 4, this node has 4 GPUs"),
                                           ("0,1", "names 2 devices for 100 shares")])
def test_devices_that_do_not_fit_the_node_are_refused(devices, says):
    with pytest.raises(AllocateError, match=says):
        container_env(pod("bad", 100, devices=devices), GPUS)


def test_fake_gpu_uuids_are_stable_and_distinct():
    assert fake_gpus("node-a", 4, "T4") == fake_gpus("node-a", 4, "T4")
    assert len(set(GPUS.uuids) | set(fake_gpus("node-b", 4, "T4").uuids)) == 8


# ---------------------------------------------------------------- the gRPC service
class Pods:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods, self.patched = pods, []

    def node_pods(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"]["nodeName"] == node]

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.patched.append((name, dict(annotations)))
        [p] = [p for p in self.pods if p["metadata"]["name"] == name]
        p["metadata"]["annotations"].update(annotations)


class Kubelet:
    """The kubelet's Registration service on ``kubelet.sock``; ``registered`` gets each request."""

    def __init__(self, plugin_dir: Path) -> None:
        self.registered: list[api.RegisterRequest] = []
        self.event = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        kubelet = self

        class Registration(api_pb2_grpc.RegistrationServicer):
            def Register(self, request: api.RegisterRequest, context: Any) -> api.Empty:  # noqa: N802
                kubelet.registered.append(request)
                kubelet.event.set()
                return api.Empty()

        api_pb2_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{plugin_dir / KUBELET_SOCKET}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=0).wait()


@pytest.fixture
def running(tmp_path):
    pods = Pods([pod("half", 50, devices="1", assumed=10), pod("two", 200, devices="2,3", assumed=11)])
    plugin = SharesPlugin("node-a", GPUS, pods, log=lambda _: None)
    kubelet = Kubelet(tmp_path)
    thread = threading.Thread(target=serve, args=(plugin, tmp_path), daemon=True)
    thread.start()
    assert kubelet.event.wait(20)
    channel = grpc.insecure_channel(f"unix://{tmp_path / SOCKET}")
    yield plugin, pods, kubelet, api_pb2_grpc.DevicePluginStub(channel), tmp_path
    channel.close()
    plugin.stopped.set()
    thread.join(10)
    kubelet.stop()


def test_registers_lists_and_reports_health(running):
    plugin, _, kubelet, stub, _ = running
    [request] = kubelet.registered
    assert (request.version, request.endpoint, request.resource_name) == ("v1beta1", SOCKET, "quasched.io/gpu-shares")
    stream = stub.ListAndWatch(api.Empty(), timeout=20)
    first = next(stream).devices
    assert len(first) == 400 and {d.health for d in first} == {"Healthy"}
    assert first[0].ID == f"{GPUS.uuids[0]}-0" and first[-1].ID == f"{GPUS.uuids[3]}-99"
    plugin.set_health(2, False)
    sick = {d.ID.rsplit("-", 1)[0] for d in next(stream).devices if d.health == "Unhealthy"}
    assert sick == {GPUS.uuids[2]}
    stream.cancel()


def test_allocate_gives_the_booked_devices_and_marks_the_pod(running):
    _, pods, _, stub, _ = running
    ids = [f"{GPUS.uuids[0]}-{k}" for k in range(50)]  # the kubelet's pick, not what quasched booked
    reply = stub.Allocate(api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devicesIDs=ids)]),
                          timeout=20)
    [container] = reply.container_responses
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == GPUS.uuids[1]
    assert pods.patched == [("half", {"quasched.io/assigned": "true"})]
    # the same request again: no pod waits for 50 shares any more, the kubelet gets a clear refusal
    with pytest.raises(grpc.RpcError) as refused:
        stub.Allocate(api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devicesIDs=ids)]),
                      timeout=20)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "quasched device plugin: no pod on this node waits for 50 shares" in refused.value.details()


def test_registers_again_when_the_kubelet_restarts(running):
    _, _, kubelet, _, plugin_dir = running
    kubelet.stop()
    for path in plugin_dir.iterdir():  # what a starting kubelet does to the directory
        path.unlink()
    again = Kubelet(plugin_dir)
    try:
        assert again.event.wait(20)
        assert again.registered[0].resource_name == "quasched.io/gpu-shares"
    finally:
        again.stop()

