"""A real Kubernetes control plane on 127.0.0.1 for the extender's end-to-end test and benchmark.

etcd + kube-apiserver + kube-scheduler v1.20.2 (built from Debian's ``kubernetes`` source
package by ``deploy/e2e/build-k8s.sh`` into ``~/.cache/quasched/k8s-v1.20.2/bin``; override
with ``$QUASCHED_K8S_BIN``), no kubelet, no controller manager: fake GPU nodes are API
objects with a Ready condition. Everything listens on 127.0.0.1 only.

- :func:`missing` says why the cluster cannot run here (None: it can);
- :class:`KubeCluster` starts/stops the three processes (``with KubeCluster(dir, url) as kc:``),
  writes a kubeconfig and talks to the API server with httpx (static token, self-signed TLS);
- :class:`Quasched` runs ``quasched serve`` as a child process (so it can be SIGKILLed);
- :class:`StubExtender` is a minimal stdlib extender (passes every node, binds) to check the
  harness without quasched;
- building blocks: :func:`openb_nodes` (node shapes sampled from the openb trace), :meth:`KubeCluster.add_gpu_nodes`,
  :meth:`KubeCluster.create_pod`, :meth:`KubeCluster.wait_bound`, :meth:`KubeCluster.events`.

docs/kubernetes-e2e.md describes the set-up and the measured quirks.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Mapping, Self, Sequence

import httpx
import yaml

K8S_VERSION = "v1.20.2"
BIN_DIR = Path(os.environ.get("QUASCHED_K8S_BIN") or Path.home() / ".cache/quasched/k8s-v1.20.2/bin")
GPU = "quasched.io/gpu-shares"
#: shares of one GPU
SHARES = 100
MODEL_LABEL = "quasched.io/gpu-model"
MODEL_ANNOTATION = "quasched.io/gpu-model"
DEVICES = "quasched.io/gpu-devices"
EXTENDER_PREFIX = "/k8s/scheduler"
#: the configuration the scheduler runs: the shipped one (addresses replaced)
DEPLOY_CONFIG = Path(__file__).parents[1] / "deploy" / "scheduler-config-v1beta1.yaml"
#: the extender's certificates (mutual TLS) are made by the shipped script
CERTS_SCRIPT = Path(__file__).parents[1] / "deploy" / "extender-certs.sh"
NAMESPACE = "default"
#: kube-scheduler's leader Lease in the shipped configuration
LEASE_NAMESPACE, LEASE_NAME = "quasched", "quasched-scheduler"


def etcd_binary() -> str | None:
    return shutil.which("etcd") or next((p for p in ("/usr/bin/etcd", "/usr/sbin/etcd") if os.access(p, os.X_OK)), None)


def missing() -> str | None:
    """Why the real cluster cannot run here (None when every binary is present)."""
    absent = [str(BIN_DIR / b) for b in ("kube-apiserver", "kube-scheduler") if not os.access(BIN_DIR / b, os.X_OK)]
    if etcd_binary() is None:
        absent.append("etcd (Debian package etcd-server)")
    if shutil.which("openssl") is None:
        absent.append("openssl")
    if absent:
        return ("Kubernetes binaries absent: " + ", ".join(absent)
                + " -- build them with `bash deploy/e2e/build-k8s.sh` (about 12 min on 2 cores, see docs/kubernetes-e2e.md)")
    return None


def replicas_missing() -> str | None:
    """Why kube-scheduler replicas with their own host names cannot run here (None: they can).

    kube-scheduler's Lease identity is ``<host name>_<uuid>`` and quasched's fence compares the host name, so
    each replica runs in its own UTS namespace (``unshare --uts``, root), as each would in its own pod."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) absent: kube-scheduler replicas need their own host names"
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    if probe.returncode:
        return f"`unshare --uts` refused ({probe.stderr.decode(errors='replace').strip()}): needs root"
    return None


def extender_certs(directory: Path) -> Path:
    """The extender's CA, server and client certificates made by ``deploy/extender-certs.sh`` in ``directory``."""
    if not (directory / "client.key").exists():
        subprocess.run(["bash", str(CERTS_SCRIPT), str(directory)], check=True, capture_output=True)
    return directory


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Any, timeout_s: float, proc: subprocess.Popen[bytes] | None = None,
             log: Path | None = None, interval_s: float = 0.05) -> Any:
    """Poll ``check()`` until it returns a truthy value; TimeoutError (with the log's tail) otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError):
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode}{tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready after {timeout_s:.0f} s{tail(log)}")
        time.sleep(interval_s)


def tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- {log.name} (last {len(text)} lines) ---\n" + "\n".join(text)


def stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    """Stop one child process (ours, by its pid) and reap it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------- node shapes
@dataclass(frozen=True)
class NodeShape:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


def openb_nodes(count: int, data_dir: str | Path | None = None, seed: int = 7) -> list[NodeShape]:
    """``count`` GPU nodes shaped like the openb trace's (a seeded sample of its GPU nodes, in trace order).

    Falls back to a fixed mix of openb's common shapes when the trace is not available."""
    import numpy as np

    data = data_dir or os.environ.get("QUASCHED_DATA")
    shapes: list[tuple[int, int, int, str]] = []
    if data and Path(data).exists():
        try:
            from quasched.traces.catalog import load_trace

            nodes, _ = load_trace("openb-default", data_dir=Path(data))
            gpu_rows = np.flatnonzero(np.asarray(nodes.num_gpus) > 0)
            rng = np.random.default_rng(seed)
            pick = np.sort(rng.choice(gpu_rows, size=min(count, len(gpu_rows)), replace=False))
            shapes = [(int(nodes.cpu_milli[i]), int(nodes.memory_mib[i]), int(nodes.num_gpus[i]), str(nodes.gpu_model[i]))
                      for i in pick]
        except Exception:  # an unreadable trace: the fixed mix below
            shapes = []
    if not shapes:
        mix = [(96000, 786432, 8, "G2"), (96000, 393216, 2, "T4"), (64000, 262144, 2, "P100"),
               (96000, 786432, 8, "G3"), (96000, 393216, 4, "V100M16"), (96000, 786432, 8, "V100M32")]
        shapes = [mix[i % len(mix)] for i in range(count)]
    while len(shapes) < count:
        shapes.append(shapes[len(shapes) % max(1, len(shapes))])
    return [NodeShape(f"gpu-node-{i:04d}", *shape) for i, shape in enumerate(shapes[:count])]


# ---------------------------------------------------------------- pods
def pod_manifest(name: str, gpus: int = 1, fraction: float | None = None, model: str | None = None,
                 cpu_milli: int = 1000, memory_mib: int = 1024, scheduler: str = "quasched",
                 namespace: str = NAMESPACE, extra_annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A GPU pod in quasched's convention (docs/kubernetes.md): ``quasched.io/gpu-shares`` 100 per whole GPU,
    or ``round(fraction * 100)`` for a share of one; GPU model by annotation."""
    annotations: dict[str, str] = dict(extra_annotations or {})
    shares = round(fraction * SHARES) if fraction is not None else gpus * SHARES
    if model:
        annotations[MODEL_ANNOTATION] = model
    resources: dict[str, Any] = {"requests": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}}
    if shares:
        resources["requests"][GPU] = str(shares)
        resources["limits"] = {GPU: str(shares)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "registry.invalid/pause:3.2", "resources": resources}]},
    }


# ---------------------------------------------------------------- the control plane
class Started:
    """A context manager over ``start()`` / ``stop()``: a failed start stops what it had started."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class KubeCluster(Started):
    """etcd + kube-apiserver + kube-scheduler running ``deploy/scheduler-config-v1beta1.yaml`` (quasched as extender)."""

    def __init__(self, workdir: str | Path, extender_url: str | None, scheduler_name: str = "quasched",
                 extender: Mapping[str, Any] | None = None, percentage_of_nodes_to_score: int | None = None,
                 disable_admission: Sequence[str] = (),
                 verbosity: int = 1, lone_scheduler: bool = True) -> None:
        reason = missing()
        if reason:
            raise RuntimeError(reason)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extender_url = extender_url
        #: per replica, its own extender (the sidecar of its pod)
        self.extender_urls: dict[str, str] = {}
        self.scheduler_name = scheduler_name
        self.extender_overrides = dict(extender or {})
        self.percentage = percentage_of_nodes_to_score
        self.verbosity = verbosity
        self.lone_scheduler = lone_scheduler
        # ServiceAccount: no controller manager creates the default account; TaintNodesByCondition: no
        # not-ready taint on fake nodes (no kubelet); Priority (optional): lets pods set spec.priority directly
        self.disabled_admission = ["ServiceAccount", "TaintNodesByCondition", *disable_admission]
        self.token = secrets.token_hex(16)
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.api_port = free_port()
        #: replica name ('' = the lone scheduler without leader election) -> (healthz port, metrics port)
        self.sched_ports: dict[str, tuple[int, int]] = {}
        self.certs = self.dir / "extender-pki"
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.kubeconfig = self.dir / "kubeconfig"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self._api: httpx.Client | None = None
        self.startup_s = 0.0

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """etcd, kube-apiserver and (``lone_scheduler``) one kube-scheduler; ``start_scheduler(replica)`` adds
        replicas that elect a leader."""
        t0 = time.monotonic()
        self._certs()
        self._start_etcd()
        self._start_apiserver()
        self._write_kubeconfig()
        if self.lone_scheduler:
            self.start_scheduler()
        self.startup_s = time.monotonic() - t0

    def stop(self) -> None:
        for name in [n for n in self.procs if n.startswith("kube-scheduler")] + ["kube-apiserver", "etcd"]:
            stop_process(self.procs.pop(name, None))
        if self._api is not None:
            self._api.close()
            self._api = None

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        log = self.dir / f"{name}.log"
        self.logs[name] = log
        out = open(log, "ab")
        try:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.dir, start_new_session=True)
        finally:
            out.close()
        self.procs[name] = proc
        return proc

    def _certs(self) -> None:
        d = self.dir / "pki"
        d.mkdir(exist_ok=True)
        self.sa_key = d / "sa.key"
        self.sa_pub = d / "sa.pub"
        if not self.sa_key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(self.sa_key), "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub)],
                           check=True, capture_output=True)
        # the API server's serving certificate: self-signed, generated by kube-apiserver in --cert-dir
        extender_certs(self.certs)
        self.tokens = d / "tokens.csv"
        self.tokens.write_text(f'{self.token},admin,admin,"system:masters"\n')
        os.chmod(self.tokens, 0o600)

    def _start_etcd(self) -> None:
        etcd = etcd_binary()
        assert etcd is not None
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer}"
        proc = self._spawn("etcd", [
            etcd, "--name", "e2e", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"e2e={peer}", "--unsafe-no-fsync", "--log-level", "warn",
        ])
        wait_for("etcd", lambda: httpx.get(f"{client}/health", timeout=1).status_code == 200, 30, proc,
                 self.logs["etcd"])

    def _start_apiserver(self, attempts: int = 3) -> None:
        """kube-apiserver on a free port: a port found free may be taken by another process before the server binds
        it (any outgoing connection picks from the same range), so a start refused with "address already in use"
        is tried again on another port."""
        for attempt in range(attempts):
            try:
                return self._spawn_apiserver()
            except RuntimeError:
                log = self.logs["kube-apiserver"].read_text(errors="replace")
                if "address already in use" not in log or attempt == attempts - 1:
                    raise
                self.api_port, self._api = free_port(), None
                self.server = f"https://127.0.0.1:{self.api_port}"

    def _spawn_apiserver(self) -> None:
        proc = self._spawn("kube-apiserver", [
            str(BIN_DIR / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}", "--insecure-port=0",
            f"--cert-dir={self.dir / 'pki'}",
            f"--token-auth-file={self.tokens}",
            f"--service-account-key-file={self.sa_pub}",
            f"--service-account-signing-key-file={self.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=AlwaysAllow",
            "--disable-admission-plugins=" + ",".join(self.disabled_admission),
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
            "--profiling=false", f"--v={self.verbosity}",
        ])
        wait_for("kube-apiserver", lambda: self.api.get("/readyz").status_code == 200, 90, proc,
                 self.logs["kube-apiserver"], interval_s=0.2)
        # the default namespace is created by the apiserver's bootstrap controller
        wait_for("namespace default", lambda: self.api.get(f"/api/v1/namespaces/{NAMESPACE}").status_code == 200,
                 30, proc, self.logs["kube-apiserver"], interval_s=0.2)

    @property
    def api(self) -> httpx.Client:
        if self._api is None:
            self._api = httpx.Client(base_url=self.server, verify=False, timeout=30,
                                     headers={"Authorization": f"Bearer {self.token}"},
                                     limits=httpx.Limits(max_connections=32, max_keepalive_connections=32))
        return self._api

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin", "namespace": NAMESPACE}}],
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is YAML
        os.chmod(self.kubeconfig, 0o600)

    def scheduler_config(self, replica: str = "") -> dict[str, Any]:
        """The shipped ``deploy/scheduler-config-v1beta1.yaml`` with this cluster's addresses and options; the
        extender over mutual TLS with the certificates of :func:`extender_certs` when its URL is https. A
        ``replica`` keeps the shipped leader election (the Lease ``quasched/quasched-scheduler``)."""
        config: dict[str, Any] = yaml.safe_load(DEPLOY_CONFIG.read_text())
        [profile] = config["profiles"]
        profile["schedulerName"] = self.scheduler_name
        health, metrics = self.sched_ports[replica]
        config.update({
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 500, "burst": 1000},
            # v1.20 quirk: with --config, the insecure healthz/metrics port opens on every interface unless bound here
            "healthzBindAddress": f"127.0.0.1:{health}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
        })
        if not replica:
            config["leaderElection"] = {"leaderElect": False}
        if self.percentage is not None:
            config["percentageOfNodesToScore"] = self.percentage
        url = self.extender_urls.get(replica, self.extender_url)
        if url:
            [extender] = config["extenders"]
            extender["urlPrefix"] = url.rstrip("/") + EXTENDER_PREFIX
            extender["enableHTTPS"] = url.startswith("https:")
            if extender["enableHTTPS"]:
                extender["tlsConfig"] = {"certFile": str(self.certs / "client.crt"),
                                         "keyFile": str(self.certs / "client.key"), "caFile": str(self.certs / "ca.crt")}
            else:
                extender.pop("tlsConfig", None)
            extender.update(self.extender_overrides)
        else:
            config.pop("extenders")
        return config

    def start_scheduler(self, replica: str = "", extender_url: str | None = None) -> None:
        """Start kube-scheduler: the lone one (no leader election), or ``replica``, one of several electing a
        leader, with host name ``replica`` (:func:`replicas_missing`) and its own extender ``extender_url``."""
        if extender_url is not None:
            self.extender_urls[replica] = extender_url
        if replica and not self.namespace_exists(LEASE_NAMESPACE):
            self.check(self.api.post("/api/v1/namespaces", json={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}))
        health = free_port()
        metrics = free_port()
        self.sched_ports[replica] = (health, metrics if metrics != health else free_port())
        name = f"kube-scheduler-{replica}" if replica else "kube-scheduler"
        path = self.dir / f"{name}.yaml"
        path.write_text(json.dumps(self.scheduler_config(replica), indent=2))
        argv = [str(BIN_DIR / "kube-scheduler"), f"--config={path}",
                "--secure-port=0",  # no authenticated port (it would need delegated authn); healthz above
                f"--v={self.verbosity}"]
        if replica:  # its own host name, so its Lease identity is "<replica>_<uuid>" (as a pod's name would be)
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', replica, *argv]
        proc = self._spawn(name, argv)
        wait_for(name, lambda: httpx.get(
            f"http://127.0.0.1:{self.sched_ports[replica][0]}/healthz", timeout=1).status_code == 200, 60, proc,
            self.logs[name], interval_s=0.1)

    def stop_scheduler(self, replica: str = "", sig: int = signal.SIGTERM) -> None:
        stop_process(self.procs.pop(f"kube-scheduler-{replica}" if replica else "kube-scheduler", None), sig)

    def scheduler_metrics(self, replica: str = "") -> str:
        return httpx.get(f"http://127.0.0.1:{self.sched_ports[replica][1]}/metrics", timeout=10).text

    def namespace_exists(self, name: str) -> bool:
        return self.api.get(f"/api/v1/namespaces/{name}").status_code == 200

    def lease_holder(self) -> str:
        """The holder of kube-scheduler's leader Lease ('' when none)."""
        r = self.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}")
        return str((self.check(r).get("spec") or {}).get("holderIdentity") or "") if r.status_code != 404 else ""

    # ------------------------------------------------------------ API calls
    def check(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise RuntimeError(f"{response.request.method} {response.request.url.path}: "
                               f"{response.status_code} {response.text[:500]}")
        return response.json()

    def add_gpu_nodes(self, shapes: Iterable[NodeShape]) -> list[str]:
        """Create fake GPU nodes (capacity/allocatable with 100 ``quasched.io/gpu-shares`` per GPU, as quasched's
        device plugin advertises them; GPU model label; Ready)."""
        names: list[str] = []
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for s in shapes:
            labels = {"kubernetes.io/hostname": s.name, "kubernetes.io/os": "linux", MODEL_LABEL: s.model,
                      "nvidia.com/gpu.product": s.model}
            self.check(self.api.post("/api/v1/nodes", json={
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": s.name, "labels": labels}}))
            capacity = {"cpu": f"{s.cpu_milli}m", "memory": f"{s.memory_mib}Mi", "pods": "110", GPU: str(s.gpus * SHARES)}
            status = {"status": {
                "capacity": capacity, "allocatable": capacity,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "fake node (quasched e2e)", "lastHeartbeatTime": now,
                                "lastTransitionTime": now}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": s.name}],
            }}
            self.check(self.api.patch(f"/api/v1/nodes/{s.name}/status", json=status,
                                      headers={"Content-Type": "application/strategic-merge-patch+json"}))
            node = self.check(self.api.get(f"/api/v1/nodes/{s.name}"))
            taints = (node.get("spec") or {}).get("taints") or []
            if taints:  # TaintNodesByCondition not disabled: remove the not-ready taint (no kubelet runs)
                self.check(self.api.patch(f"/api/v1/nodes/{s.name}", json={"spec": {"taints": []}},
                                          headers={"Content-Type": "application/merge-patch+json"}))
            names.append(s.name)
        return names

    def create_pod(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        ns = manifest["metadata"].get("namespace", NAMESPACE)
        return dict(self.check(self.api.post(f"/api/v1/namespaces/{ns}/pods", json=manifest)))

    def pod(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return dict(self.check(self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")))

    def pods(self, namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
        items = self.check(self.api.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]
        return {p["metadata"]["name"]: p for p in items}

    def delete_pod(self, name: str, namespace: str = NAMESPACE) -> None:
        r = self.api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", params={"gracePeriodSeconds": 0})
        if r.status_code not in (200, 202, 404):
            self.check(r)

    def set_pod_phase(self, name: str, phase: str, namespace: str = NAMESPACE) -> None:
        """What a kubelet would report: the pod ``Running``/``Succeeded``/``Failed``."""
        self.check(self.api.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                                  json={"status": {"phase": phase}},
                                  headers={"Content-Type": "application/merge-patch+json"}))

    def wait_bound(self, names: Iterable[str], timeout_s: float = 120.0,
                   namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
        """Wait until every pod in ``names`` has ``spec.nodeName``; the pods by name."""
        want = set(names)
        def bound() -> dict[str, dict[str, Any]] | None:
            pods = self.pods(namespace)
            done = {n: pods[n] for n in want if n in pods and (pods[n].get("spec") or {}).get("nodeName")}
            return done if len(done) == len(want) else None
        try:
            return dict(wait_for("pods bound", bound, timeout_s, interval_s=0.2))
        except TimeoutError:
            pods = self.pods(namespace)
            left = sorted(n for n in want if not (pods.get(n, {}).get("spec") or {}).get("nodeName"))
            why = {n: [e.get("message") for e in self.events(n) if e.get("reason") == "FailedScheduling"][-1:]
                   for n in left[:10]}
            raise TimeoutError(f"{len(left)} of {len(want)} pods not bound after {timeout_s:.0f} s: {why}"
                               f"{tail(self.logs.get('kube-scheduler'), 10)}") from None

    def events(self, pod: str | None = None, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        params = {"fieldSelector": f"involvedObject.name={pod}"} if pod else {}
        items = self.check(self.api.get(f"/api/v1/namespaces/{namespace}/events", params=params))["items"]
        return list(items)

    def wait_event(self, pod: str, reason: str = "FailedScheduling", timeout_s: float = 60.0) -> dict[str, Any]:
        return dict(wait_for(f"{reason} event of {pod}", lambda: next(
            (e for e in self.events(pod) if e.get("reason") == reason), None), timeout_s, interval_s=0.2))


# ---------------------------------------------------------------- quasched serve as a child process
class Quasched:
    """``quasched serve`` in its own process (SIGKILL-able), with the kube extender pointed at ``kubeconfig``.

    The verbs listen on :attr:`verbs_url` over mutual TLS with the certificates of the cluster it is
    :meth:`attach`-ed to (``tls=False``: on :attr:`url`, ``--kube-plain-http``). ``extra_args`` are appended."""

    KUBE_ARGS = ("--kube-extender", "--kubeconfig", "{kubeconfig}")

    def __init__(self, workdir: str | Path, kubeconfig: Path | None, port: int | None = None,
                 extra_args: Sequence[str] = (), policy: str = "fgd", db: str | None = None,
                 cluster_file: Path | None = None, tls: bool = True) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = kubeconfig
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tls_port = free_port() if tls else None
        self.verbs_url = f"https://127.0.0.1:{self.tls_port}" if tls else self.url
        self.certs: Path | None = None
        self.extra_args = list(extra_args)
        self.policy = policy
        self.db = db or f"sqlite:///{self.dir / 'quasched.db'}"
        self.cluster_file = cluster_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "quasched.log"
        self._client: httpx.Client | None = None
        self.starts = 0

    def attach(self, kc: KubeCluster) -> None:
        """Use ``kc``'s API server (its kubeconfig) and its extender certificates."""
        self.kubeconfig = kc.kubeconfig
        self.certs = kc.certs

    def argv(self) -> list[str]:
        exe = shutil.which("quasched", path=str(Path(sys.executable).parent)) or shutil.which("quasched")
        cmd = [exe] if exe else [sys.executable, "-m", "quasched.cli"]
        cmd += ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--db", self.db, "--policy", self.policy]
        if self.cluster_file is not None:
            cmd += ["--cluster", str(self.cluster_file)]
        if self.kubeconfig is not None:
            cmd += [a.format(kubeconfig=self.kubeconfig) for a in self.KUBE_ARGS]
            if self.tls_port is None:
                cmd += ["--kube-plain-http"]
            else:
                assert self.certs is not None, "attach() the cluster first: its extender certificates"
                cmd += ["--kube-tls-port", str(self.tls_port), "--kube-tls-cert", str(self.certs / "server.crt"),
                        "--kube-tls-key", str(self.certs / "server.key"), "--kube-client-ca", str(self.certs / "ca.crt")]
        return cmd + self.extra_args

    def verbs(self, client_cert: bool = True) -> httpx.Client:
        """An HTTPS client of the verbs' listener (verifying quasched's certificate), with kube-scheduler's client
        certificate or (``client_cert=False``) without one."""
        assert self.certs is not None and self.tls_port is not None
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        if client_cert:
            context.load_cert_chain(str(self.certs / "client.crt"), str(self.certs / "client.key"))
        return httpx.Client(base_url=self.verbs_url, verify=context, timeout=30)

    def start(self, timeout_s: float = 60.0) -> None:
        out = open(self.log, "ab")
        try:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.dir, env=env, start_new_session=True)
        finally:
            out.close()
        self.starts += 1
        wait_for("quasched serve", lambda: httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200,
                 timeout_s, self.proc, self.log, interval_s=0.1)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs (the crash the store must survive)."""
        stop_process(self.proc, signal.SIGKILL)
        self.proc = None

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Quasched:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def token(self) -> str:
        return (self.dir / "quasched.token").read_text().strip()

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.url, timeout=30,
                                        headers={"Authorization": f"Bearer {self.token}"})
        return self._client

    def jobs(self, **params: Any) -> list[dict[str, Any]]:
        """Every job (``GET /api/v1/jobs``, all pages), newest first."""
        out: list[dict[str, Any]] = []
        while True:
            r = self.client.get("/api/v1/jobs", params={"limit": 1000, "offset": len(out), **params})
            r.raise_for_status()
            page = r.json()
            out += page
            if len(page) < 1000:
                return out

    def nodes(self) -> list[dict[str, Any]]:
        r = self.client.get("/api/v1/nodes")
        r.raise_for_status()
        return list(r.json())

    def ensure_queue(self, name: str = "default", quota: float = 1_000_000) -> None:
        """The queue pods land in (annotation ``quasched.io/queue``, default ``default``), with room for all."""
        r = self.client.get("/api/v1/queues")
        r.raise_for_status()
        if any(q.get("name") == name for q in r.json()):
            return
        r = self.client.put(f"/api/v1/queues/{name}", json={"quota": {"*": quota}})
        r.raise_for_status()

    def metrics(self) -> str:
        return self.client.get("/metrics", timeout=10).text


# ---------------------------------------------------------------- two replicas (deploy/quasched.yaml's set-up)
class Pairs:
    """Replicas of deploy/quasched.yaml on one control plane: each a kube-scheduler (leader election on the Lease
    ``quasched/quasched-scheduler``, its own host name) with its own ``quasched serve`` sidecar, which binds only
    while that kube-scheduler holds the Lease. ``kc`` must be started with ``lone_scheduler=False``."""

    def __init__(self, kc: KubeCluster, workdir: Path, names: Sequence[str] = ("replica-a", "replica-b"),
                 policy: str = "fgd") -> None:
        self.kc = kc
        self.quasched = {name: Quasched(workdir / name, None, policy=policy, extra_args=[
            "--kube-lease", f"{LEASE_NAMESPACE}/{LEASE_NAME}", "--kube-scheduler-identity", name]) for name in names}

    def start(self, nodes: int) -> None:
        """Start every sidecar (each sees ``nodes`` nodes), then every kube-scheduler; wait for a leader."""
        for q in self.quasched.values():
            q.attach(self.kc)
            q.start()
            q.ensure_queue("default")
        for q in self.quasched.values():
            wait_for("quasched sees the nodes", lambda: len(q.nodes()) == nodes, 60, q.proc, q.log)
        for name, q in self.quasched.items():
            self.kc.start_scheduler(name, q.verbs_url)
        wait_for("a leader", self.leader, 60)

    def leader(self) -> str | None:
        """The replica whose kube-scheduler holds the Lease (None: none yet)."""
        holder = self.kc.lease_holder()
        return next((name for name in self.quasched if holder.startswith(name + "_")), None)

    def kill(self, name: str) -> None:
        """``kill -9`` of the pair: its kube-scheduler first (so no extender call of it ever fails), then quasched."""
        self.kc.stop_scheduler(name, signal.SIGKILL)
        self.quasched[name].kill()

    def stop(self) -> None:
        for name, q in self.quasched.items():
            self.kc.stop_scheduler(name)
            q.stop()


# ---------------------------------------------------------------- a minimal extender (harness self-check)
class StubExtender:
    """A stdlib extender on 127.0.0.1 (TCP_NODELAY): filter passes the first node given alone (kept in
    ``answered`` per pod), prioritize (if configured and called) scores 0, bind creates the Binding. Records
    every call's verb in ``calls`` as it arrives (before the work, so a pod seen bound has its bind recorded)."""

    def __init__(self, cluster: KubeCluster | None = None) -> None:
        self.cluster = cluster
        self.calls: list[str] = []
        self.answered: dict[str, str] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                verb = self.path.rsplit("/", 1)[-1]
                stub.calls.append(verb)
                reply: Any
                if verb == "filter":
                    names = body.get("NodeNames") or [n["metadata"]["name"] for n in (body.get("Nodes") or {}).get("items", [])]
                    stub.answered[body["Pod"]["metadata"]["name"]] = names[0]
                    reply = {"Nodes": None, "NodeNames": names[:1], "FailedNodes": {}, "Error": ""}
                elif verb == "prioritize":
                    names = body.get("NodeNames") or []
                    reply = [{"Host": n, "Score": 0} for n in names]
                elif verb == "bind":
                    reply = {"Error": ""}
                    assert stub.cluster is not None
                    r = stub.cluster.api.post(
                        f"/api/v1/namespaces/{body['PodNamespace']}/pods/{body['PodName']}/binding",
                        json={"apiVersion": "v1", "kind": "Binding",
                              "metadata": {"name": body["PodName"], "uid": body.get("PodUID")},
                              "target": {"apiVersion": "v1", "kind": "Node", "name": body["Node"]}})
                    if r.status_code >= 300:
                        reply = {"Error": r.text}
                else:
                    reply = {"Error": f"unknown verb {verb}"}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="stub-extender")

    def __enter__(self) -> StubExtender:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
