"""The deploy files: scheduler configurations (v1, v1beta1), the two-replica manifest, the certificate script agree
with each other and with what docs/kubernetes.md says."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from repo import REPO

from quasched.kube.extender import PREFIX

DEPLOY = REPO / "deploy"
CONFIGS = [("scheduler-config-v1.yaml", "v1"), ("scheduler-config-v1beta1.yaml", "v1beta1")]


def manifest() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "quasched.yaml").read_text()) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("name, version", CONFIGS)
def test_scheduler_configurations(name, version):
    config = yaml.safe_load((DEPLOY / name).read_text())
    assert config["apiVersion"] == f"kubescheduler.config.k8s.io/{version}"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == ["quasched"]
    # quasched's filter sees every feasible node and answers its pick alone: kube-scheduler does not score
    assert config["percentageOfNodesToScore"] == 100
    assert config["profiles"][0]["plugins"]["score"]["disabled"] == [{"name": "*"}]
    # preemption is quasched's alone: kube-scheduler's sees GPU pods fit without victims (and 1.20 crashes on two
    # such candidates, never asking the preempt verb)
    assert config["profiles"][0]["plugins"]["postFilter"]["disabled"] == [{"name": "DefaultPreemption"}]
    [ext] = config["extenders"]
    assert ext["urlPrefix"] == f"https://127.0.0.1:8443{PREFIX}"  # the sidecar of the same pod
    # preempt answers no victims: quasched evicts for GPU pods itself
    assert (ext["filterVerb"], ext["bindVerb"], ext["preemptVerb"]) == ("filter", "bind", "preempt")
    assert "prioritizeVerb" not in ext and "weight" not in ext
    assert ext["nodeCacheCapable"] is True and ext["httpTimeout"] == "5s"
    assert ext["enableHTTPS"] is True and ext["ignorable"] is False
    assert ext["tlsConfig"] == {"certFile": "/etc/quasched/tls/client.crt", "keyFile": "/etc/quasched/tls/client.key",
                                "caFile": "/etc/quasched/tls/ca.crt"}
    # the device plugin's resource, left by kube-scheduler to quasched (filter sees every GPU pod, one that must
    # preempt included); nvidia.com/gpu only reaches quasched to be refused
    assert ext["managedResources"] == [{"name": "quasched.io/gpu-shares", "ignoredByScheduler": True},
                                       {"name": "nvidia.com/gpu", "ignoredByScheduler": True}]
    election = config["leaderElection"]
    assert election["leaderElect"] is True and election["resourceLock"] == "leases"
    assert (election["resourceNamespace"], election["resourceName"]) == ("quasched", "quasched-scheduler")
    # a dead leader is replaced after at most leaseDuration + retryPeriod
    assert int(election["leaseDuration"][:-1]) + int(election["retryPeriod"][:-1]) <= 10


def test_v1_and_v1beta1_say_the_same():
    v1, beta = (yaml.safe_load((DEPLOY / name).read_text()) for name, _ in CONFIGS)
    version_specific = {"apiVersion", "clientConnection", "healthzBindAddress", "metricsBindAddress"}
    assert {k: v for k, v in v1.items() if k not in version_specific} == {
        k: v for k, v in beta.items() if k not in version_specific}


def test_two_replicas_with_a_sidecar_each():
    kinds = manifest()
    deployment = kinds["Deployment/quasched-scheduler"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"kube-scheduler", "quasched"}
    args = containers["quasched"]["args"]
    config = yaml.safe_load((DEPLOY / "scheduler-config-v1.yaml").read_text())
    [ext] = config["extenders"]
    url = urlsplit(ext["urlPrefix"])
    assert "--kube-extender" in args and "--kube-plain-http" not in args
    assert (flag(args, "--kube-tls-host"), int(flag(args, "--kube-tls-port"))) == (url.hostname, url.port)
    election = config["leaderElection"]
    assert flag(args, "--kube-lease") == f"{election['resourceNamespace']}/{election['resourceName']}"
    mounts = {c: {m["name"]: m["mountPath"] for m in containers[c]["volumeMounts"]} for c in containers}
    tls_dir = mounts["quasched"]["tls"]
    assert mounts["kube-scheduler"]["tls"] == tls_dir
    assert flag(args, "--kube-client-ca") == ext["tlsConfig"]["caFile"] == f"{tls_dir}/ca.crt"
    assert (flag(args, "--kube-tls-cert"), flag(args, "--kube-tls-key")) == (f"{tls_dir}/server.crt",
                                                                            f"{tls_dir}/server.key")
    # the pair fails together: kube-scheduler's liveness is quasched's health
    probe = containers["kube-scheduler"]["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz" and probe["port"] == int(flag(args, "--port"))
    # quasched is ready once started (/readyz), alive also while it starts (/healthz)
    probes = {kind: containers["quasched"][kind]["httpGet"]["path"] for kind in ("readinessProbe", "livenessProbe")}
    assert probes == {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    assert pod["serviceAccountName"] == "quasched-scheduler"
    assert not [k for k in kinds if k.startswith("Service/")]  # nothing outside the pod calls the verbs


def test_rbac_narrowed_and_network_policy():
    kinds = manifest()
    rules = {(group, resource, verb) for rule in kinds["ClusterRole/quasched-extender"]["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert rules == {("", "nodes", v) for v in ("get", "list", "watch")} | {
        ("", "pods", v) for v in ("get", "list", "watch", "patch")} | {
        ("", "pods/binding", "create"), ("", "pods/eviction", "create")} | {
        (g, "podgroups", v) for g in ("scheduling.x-k8s.io", "scheduling.volcano.sh") for v in ("get", "list", "watch")}
    lease_rules = kinds["Role/quasched-scheduler-leases"]["rules"]
    assert kinds["Role/quasched-scheduler-leases"]["metadata"]["namespace"] == "quasched"
    assert [r["resources"] for r in lease_rules] == [["leases"]]
    policy = kinds["NetworkPolicy/quasched-scheduler"]["spec"]
    labels = kinds["Deployment/quasched-scheduler"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"] == labels
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"} and policy["ingress"] == []


def test_certificate_script(tmp_path):
    """deploy/extender-certs.sh: a CA, a server certificate for 127.0.0.1, a client certificate, both signed by it."""
    subprocess.run(["bash", str(DEPLOY / "extender-certs.sh"), str(tmp_path)], check=True, capture_output=True)
    for name in ("server", "client"):
        verify = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / f"{name}.crt")],
                                capture_output=True, text=True)
        assert verify.returncode == 0, verify.stderr
        assert (tmp_path / f"{name}.key").stat().st_mode & 0o077 == 0  # private keys readable by the owner only
    text = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "server.crt"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "IP Address:127.0.0.1" in text and "TLS Web Server Authentication" in text
    client = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "client.crt"), "-noout", "-text"],
                            capture_output=True, text=True, check=True).stdout
    assert "TLS Web Client Authentication" in client


def test_device_plugin_daemonset():
    """The node part: the kubelet's socket directory, the node's name from the downward API, only the pod verbs
    Allocate needs and the node patch that publishes the GPUs' live state."""
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "device-plugin.yaml").read_text()) if d}
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"][0] == "device-plugin"
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    [volume] = pod["volumes"]
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert container["volumeMounts"][0]["mountPath"] == volume["hostPath"]["path"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    pods, nodes = docs["ClusterRole"]["rules"]
    assert pods["resources"] == ["pods"] and sorted(pods["verbs"]) == ["get", "list", "patch"]
    assert nodes["resources"] == ["nodes"] and nodes["verbs"] == ["patch"]


def test_podgroup_crd_serves_what_quasched_reads():
    """deploy/podgroup-crd.yaml defines the coscheduling PodGroup with the fields :mod:`quasched.kube.gangs` reads."""
    from quasched.kube.gangs import GROUP_LABEL, PODGROUP_APIS

    crd = yaml.safe_load((DEPLOY / "podgroup-crd.yaml").read_text())
    group, version = PODGROUP_APIS["coscheduling"].split("/")
    assert crd["spec"]["group"] == group == GROUP_LABEL.split("/")[0] and crd["spec"]["names"]["plural"] == "podgroups"
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    fields = served["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"minMember", "scheduleTimeoutSeconds"} <= set(fields) and served["served"]


def test_pytorchjob_example_is_one_gang_quasched_reads():
    """examples/pytorchjob-gang.yaml: its pods join its PodGroup, ask quasched for 8 GPUs each, and as many pods as
    minMember (master + workers) make the group."""
    from quasched.kube.convention import job_spec
    from quasched.kube.gangs import group_of, group_spec

    podgroup, job = yaml.safe_load_all((REPO / "examples" / "pytorchjob-gang.yaml").read_text())
    replicas = job["spec"]["pytorchReplicaSpecs"]
    pods = [{**r["template"], "metadata": {**r["template"]["metadata"], "namespace": "ml", "name": f"{kind}-{i}"}}
            for kind, r in replicas.items() for i in range(r["replicas"])]
    refs = {group_of(p) for p in pods}
    assert len(refs) == 1 and next(iter(refs)).name == podgroup["metadata"]["name"]
    assert group_spec(podgroup, next(iter(refs))).min_member == len(pods) == 4
    assert all(p["spec"]["schedulerName"] == "quasched" and job_spec(p).num_gpu == 8 for p in pods)
