"""The deploy files: scheduler configurations (v1, v1beta1) and manifests are what docs/kubernetes.md says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from quasched.kube.extender import PREFIX

DEPLOY = Path(__file__).parents[1] / "deploy"


@pytest.mark.parametrize("name, version", [("scheduler-config-v1.yaml", "v1"),
                                           ("scheduler-config-v1beta1.yaml", "v1beta1")])
def test_scheduler_configurations(name, version):
    config = yaml.safe_load((DEPLOY / name).read_text())
    assert config["apiVersion"] == f"kubescheduler.config.k8s.io/{version}"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == ["quasched"]
    # quasched's prioritize alone ranks every node: its pick is the unique top score
    assert config["percentageOfNodesToScore"] == 100
    assert config["profiles"][0]["plugins"]["score"]["disabled"] == [{"name": "*"}]
    [ext] = config["extenders"]
    assert ext["urlPrefix"].endswith(PREFIX)
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == ("filter", "prioritize", "bind")
    assert "preemptVerb" not in ext
    assert ext["nodeCacheCapable"] is True and ext["weight"] > 0 and ext["httpTimeout"] == "5s"
    # the device plugin's resource, counted by kube-scheduler too; nvidia.com/gpu only reaches quasched to be refused
    assert ext["managedResources"] == [{"name": "quasched.io/gpu-shares", "ignoredByScheduler": False},
                                       {"name": "nvidia.com/gpu", "ignoredByScheduler": True}]


def test_manifests():
    docs = [d for d in yaml.safe_load_all((DEPLOY / "quasched.yaml").read_text()) if d]
    kinds = {d["kind"]: d for d in docs}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"} <= set(kinds)
    rules = {(r["resources"][0], v) for r in kinds["ClusterRole"]["rules"] for v in r["verbs"]}
    for need in [("nodes", "list"), ("nodes", "watch"), ("pods", "list"), ("pods", "watch"), ("pods", "patch"),
                 ("pods/binding", "create"), ("events", "create")]:
        assert need in rules, need
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert "--kube-extender" in container["args"]
    assert kinds["Service"]["spec"]["ports"][0]["port"] == 8080
    url = yaml.safe_load((DEPLOY / "scheduler-config-v1.yaml").read_text())["extenders"][0]["urlPrefix"]
    assert url.startswith(f"http://{kinds['Service']['metadata']['name']}.{kinds['Service']['metadata']['namespace']}.svc:8080")
    assert [d["kind"] for d in yaml.safe_load_all((DEPLOY / "kube-scheduler.yaml").read_text()) if d]


def test_device_plugin_daemonset():
    """The node part: the kubelet's socket directory, the node's name from the downward API, and only the pod
    verbs Allocate needs."""
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
    [rule] = docs["ClusterRole"]["rules"]
    assert rule["resources"] == ["pods"] and sorted(rule["verbs"]) == ["get", "list", "patch"]
