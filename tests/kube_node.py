"""A real node for the Kubernetes end-to-end test: kubelet v1.20.2 on this machine against Debian's containerd
and runc, with quasched's device plugin advertising fake GPUs (docs/kubernetes-e2e.md).

Everything is private to a work directory (containerd's socket, root and state; the kubelet's root dir and
config) except what the kubelet hard-codes: ``/var/lib/kubelet/device-plugins`` (the device-plugin socket
directory) and the cgroup hierarchies under ``/sys/fs/cgroup``. Images are built offline from Debian's
``busybox-static`` (:func:`busybox_image`) and imported into containerd; pods use the host network, so no CNI
plugin is ever called (a bridge configuration is present only so that containerd reports the network ready).

- :func:`missing` says why a kubelet cannot run here (None: it can);
- :class:`KubeletNode` starts containerd, the kubelet and ``quasched device-plugin``, and stops them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from kube_cluster import BIN_DIR, KubeCluster, Started, free_port, stop_process, tail, wait_for

PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
BUSYBOX = Path("/bin/busybox")
IMAGE = "quasched.local/busybox:e2e"
PAUSE = "quasched.local/pause:e2e"
APPLETS = ("sh", "echo", "env", "sleep", "cat", "true")


def missing() -> str | None:
    """Why a kubelet node cannot run here (None when it can)."""
    why: list[str] = []
    if not os.access(BIN_DIR / "kubelet", os.X_OK):
        why.append(f"{BIN_DIR / 'kubelet'} absent (bash deploy/e2e/build-k8s.sh builds it)")
    for tool, package in (("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc")):
        if shutil.which(tool) is None:
            why.append(f"{tool} absent (Debian package {package})")
    if not BUSYBOX.is_file() or not _static(BUSYBOX):
        why.append(f"{BUSYBOX} is not a static busybox (Debian package busybox-static)")
    if os.geteuid() != 0:
        why.append("not root (the kubelet and containerd need root)")
    if not Path("/sys/fs/cgroup/cpu").is_dir() or not os.access("/sys/fs/cgroup/cpu", os.W_OK):
        why.append("no writable cgroup v1 hierarchy at /sys/fs/cgroup/cpu (kubelet 1.20 with cgroupfs needs one)")
    return "; ".join(why) or None


def _static(path: Path) -> bool:
    try:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return True  # no ldd: assume the Debian package's static build
    return out.returncode != 0 or "not a dynamic" in out.stdout + out.stderr


def _tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def busybox_image(out: Path, tags: tuple[str, ...], cmd: list[str]) -> Path:
    """A ``docker save`` tarball of a one-layer image: busybox-static at /bin/busybox plus applet links."""
    body = BUSYBOX.read_bytes()
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for name, kind in (("bin", tarfile.DIRTYPE), ("tmp", tarfile.DIRTYPE)):
        info = tarfile.TarInfo(name)
        info.type, info.mode = kind, 0o1777 if name == "tmp" else 0o755
        members.append((info, None))
    info = tarfile.TarInfo("bin/busybox")
    info.size, info.mode = len(body), 0o755
    members.append((info, body))
    for applet in APPLETS:
        link = tarfile.TarInfo(f"bin/{applet}")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        members.append((link, None))
    layer = _tar_bytes(members)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": cmd},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
    }).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": list(tags), "Layers": [f"{layer_id}/layer.tar"]}]).encode()
    files: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for name, data in ((f"{layer_id}/layer.tar", layer), (config_name, config), ("manifest.json", manifest)):
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        files.append((info, data))
    out.write_bytes(_tar_bytes(files))
    return out


class KubeletNode(Started):
    """containerd + kubelet (node ``name``) + ``quasched device-plugin --fake-gpus gpus`` against ``cluster``."""

    def __init__(self, cluster: KubeCluster, workdir: Path, name: str, gpus: int, model: str,
                 gpu_memory_mib: int = 16384) -> None:
        self.cluster, self.dir, self.name, self.gpus, self.model = cluster, Path(workdir), name, gpus, model
        self.gpu_memory_mib = gpu_memory_mib
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sock = self.dir / "containerd.sock"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.dir / f"{name}.log"
        self.logs[name] = log
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.dir, start_new_session=True, env=env)
        self.procs[name] = proc
        return proc

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.start_containerd()
        self.import_images()
        self.start_kubelet()
        self.start_device_plugin()

    def stop(self) -> None:
        for name in ("device-plugin", "kubelet"):
            stop_process(self.procs.pop(name, None))
        self._remove_containers()
        stop_process(self.procs.pop("containerd", None))
        self._unmount()

    def _unmount(self) -> None:
        """Undo the mounts the kubelet and containerd left under the work directory (deepest first)."""
        prefix = str(self.dir.resolve()) + "/"
        with open("/proc/self/mountinfo") as info:
            points = [line.split()[4] for line in info if line.split()[4].startswith(prefix)]
        for point in sorted(set(points), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)

    def start_containerd(self) -> None:
        cni = self.dir / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-e2e.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "e2e", "plugins": [
                {"type": "bridge", "bridge": "qe2e0", "isGateway": False, "ipMasq": False,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.254.77.0/24"}]]}},
                {"type": "loopback"}]}))
        config = self.dir / "containerd.toml"
        config.write_text(f"""version = 2
root = "{self.dir / 'containerd-root'}"
state = "{self.dir / 'containerd-state'}"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
{self._runc_options()}
""")
        proc = self._spawn("containerd", ["containerd", "--config", str(config)])
        wait_for("containerd", lambda: self.sock.exists() and self._ctr("version").returncode == 0, 60, proc,
                 self.logs["containerd"], interval_s=0.2)

    def _runc_options(self) -> str:
        """runc itself, or where this machine refuses a negative ``oom_score_adj`` (some VMs do; the kubelet
        gives the pod sandbox -998), a wrapper that clamps the containers' ``oomScoreAdj`` to 0 first."""
        probe = subprocess.run(["sh", "-c", "echo -1 > /proc/self/oom_score_adj"], capture_output=True)
        if probe.returncode == 0:
            return ""
        wrapper = self.dir / "runc-oom-clamp"
        wrapper.write_text(f"""#!/bin/sh
# containerd's runtime binary for this test: runc, with negative oomScoreAdj clamped to 0 on create
prev=""
for arg in "$@"; do
    if [ "$prev" = "--bundle" ]; then sed -i -E 's/"oomScoreAdj": ?-[0-9]+/"oomScoreAdj":0/' "$arg/config.json"; fi
    prev="$arg"
done
exec {shutil.which("runc")} "$@"
""")
        wrapper.chmod(0o755)
        return f"""      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{wrapper}"
"""

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", str(self.sock), "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=120)

    def import_images(self) -> None:
        for tag, cmd in ((IMAGE, ["/bin/sh"]), (PAUSE, ["/bin/sleep", "2147483647"])):
            tarball = busybox_image(self.dir / f"{tag.rsplit('/', 1)[-1].replace(':', '-')}.tar", (tag,), cmd)
            done = self._ctr("images", "import", "--no-unpack", str(tarball))
            if done.returncode:
                raise RuntimeError(f"ctr images import {tarball}: {done.stderr or done.stdout}")

    def _remove_containers(self) -> None:
        if self.procs.get("containerd") is None or not self.sock.exists():
            return
        for kind in ("tasks", "containers"):
            listed = self._ctr(kind, "ls", "-q")
            for ident in listed.stdout.split():
                if kind == "tasks":
                    self._ctr("tasks", "kill", "-s", "SIGKILL", ident)
                    time.sleep(0.2)
                    self._ctr("tasks", "delete", "-f", ident)
                else:
                    self._ctr("containers", "delete", ident)

    def start_kubelet(self) -> None:
        PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        self.healthz = free_port()
        self.port = free_port()
        config = self.dir / "kubelet.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": self.port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.healthz,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs", "failSwapOn": False, "enforceNodeAllocatable": [],
            "cgroupRoot": "/", "kubeletCgroups": "", "systemCgroups": "",
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "syncFrequency": "5s", "nodeStatusUpdateFrequency": "2s",
            "fileCheckFrequency": "5s", "maxPods": 50,
        }))
        endpoint = f"unix://{self.sock}"
        proc = self._spawn("kubelet", [
            str(BIN_DIR / "kubelet"), f"--config={config}", f"--kubeconfig={self.cluster.kubeconfig}",
            f"--root-dir={self.dir / 'kubelet'}", f"--hostname-override={self.name}", "--node-ip=127.0.0.1",
            "--container-runtime=remote", f"--container-runtime-endpoint={endpoint}",
            f"--image-service-endpoint={endpoint}", f"--pod-infra-container-image={PAUSE}",
            f"--node-labels=quasched.io/gpu-model={self.model}", "--v=2",
        ])
        wait_for("kubelet node Ready", lambda: self._ready(), 120, proc, self.logs["kubelet"], interval_s=0.5)

    def _ready(self) -> bool:
        r = self.cluster.api.get(f"/api/v1/nodes/{self.name}")
        if r.status_code != 200:
            return False
        conditions = (r.json().get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def start_device_plugin(self) -> None:
        exe = shutil.which("quasched", path=str(Path(sys.executable).parent)) or shutil.which("quasched")
        cmd = [exe] if exe else [sys.executable, "-m", "quasched.cli"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = self._spawn("device-plugin", [
            *cmd, "device-plugin", "--node-name", self.name, "--fake-gpus", str(self.gpus),
            "--gpu-model", self.model, "--gpu-memory-mib", str(self.gpu_memory_mib),
            "--kubeconfig", str(self.cluster.kubeconfig), "--plugin-dir", str(PLUGIN_DIR)], env=env)
        wait_for("gpu-shares on the node", lambda: self.shares() == 100 * self.gpus, 90, proc,
                 self.logs["device-plugin"], interval_s=0.5)

    def gpu_uuids(self) -> tuple[str, ...]:
        """The fake GPUs' UUIDs in device-index order (what the plugin advertises)."""
        from quasched.kube.deviceplugin.gpus import fake_gpus

        return fake_gpus(self.name, self.gpus, self.model).uuids

    def shares(self) -> int:
        node = self.cluster.check(self.cluster.api.get(f"/api/v1/nodes/{self.name}"))
        return int(((node.get("status") or {}).get("allocatable") or {}).get("quasched.io/gpu-shares", 0))

    def log_tail(self, name: str) -> str:
        return tail(self.logs.get(name))
