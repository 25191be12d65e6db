"""``quasched device-plugin``: the node part of the Kubernetes integration (docs/kubernetes.md)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from quasched.cli.common import fail
from quasched.report.wording import counted


def _log(message: str) -> None:
    print(f"quasched device-plugin: {message}", file=sys.stderr, flush=True)


def device_plugin(
    node_name: str = typer.Option(..., envvar="NODE_NAME", help=(
        "This node's Kubernetes name (in the DaemonSet: spec.nodeName through the downward API).")),
    fake_gpus: int = typer.Option(0, min=0, max=64, help=(
        "Advertise N fake GPUs instead of NVML's (tests, nodes without a driver).")),
    gpu_model: str = typer.Option("", help="The GPU model to report (default: NVML's device name)."),
    gpu_memory_mib: int = typer.Option(0, min=0, help=(
        "Memory per GPU for the share's memory hint (default: NVML's; 0 without NVML: no hint).")),
    plugin_dir: Path = typer.Option(Path("/var/lib/kubelet/device-plugins"), help=(
        "The kubelet's device-plugin directory (kubelet.sock is there).")),
    kubeconfig: Optional[Path] = typer.Option(None, envvar="KUBECONFIG", help=(
        "API-server credentials (default: in-cluster service account, else ~/.kube/config).")),
    kube_context: Optional[str] = typer.Option(None, help="The kubeconfig context."),
) -> None:
    """Kubelet device plugin: advertise this node's GPUs as quasched.io/gpu-shares (100 per GPU) and give each
    container exactly the GPUs quasched booked for its pod."""
    from quasched.extras import require

    require("grpc", "kube")
    require("google.protobuf", "kube")
    from quasched.kube.client import KubernetesClient
    from quasched.kube.deviceplugin.gpus import discover
    from quasched.kube.deviceplugin.plugin import SharesPlugin, serve
    from quasched.kube.deviceplugin.livestate import Publisher
    from quasched.service.executor.gpustate import Sampler
    from quasched.service.executor.localnode import HealthWatch, local_nvml

    try:
        gpus = discover(node_name, fake_gpus, gpu_model, gpu_memory_mib)
    except ValueError as err:
        fail(str(err))
    if not plugin_dir.is_dir():
        fail(f"--plugin-dir {plugin_dir}: not a directory (is the kubelet's device-plugins directory mounted?)")
    try:
        client = KubernetesClient(str(kubeconfig) if kubeconfig else None, kube_context)
    except Exception as err:  # no kubeconfig, a bad file, no in-cluster credentials
        fail(f"cannot load Kubernetes credentials: {err}")
    plugin = SharesPlugin(node_name, gpus, client, log=_log)
    health = HealthWatch(plugin.set_health)
    if not fake_gpus and not health.start():
        _log("NVML health watch unavailable: every GPU reported healthy")
    nvml = None if fake_gpus else local_nvml()
    sampler = None if nvml is None else Sampler(nvml, Publisher(client, node_name, log=_log))
    if sampler is not None:  # the GPUs' live state, for quasched's placement, dashboard and /metrics
        sampler.start()

    def stop(*_: Any) -> None:
        plugin.stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _log(f"node {node_name}: {counted(len(gpus.uuids), gpus.model + ' GPU')} {', '.join(gpus.uuids)}")
    try:
        serve(plugin, plugin_dir)
    finally:
        health.stop()
        if sampler is not None:
            sampler.stop()
