"""`quasched serve --kube-extender`: credentials, the extender mounted, preemption off, TCP_NODELAY (uvicorn stubbed)."""

from __future__ import annotations

from test_cli_service import cli

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: "static-token"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
"""


def test_serve_kube_extender(tmp_path, monkeypatch):
    from quasched.kube.nodelay import NoDelayH11Protocol

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ran = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: ran.update(app=app, **kw))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    r = cli("serve", "--kube-extender", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert r.exit_code == 0, r.output
    assert "urlPrefix http://127.0.0.1:8080/k8s/scheduler" in r.output and "0 nodes" in r.output
    app = ran["app"]
    assert app.state.kube.sync is not None and app.state.kube.client is not None
    assert app.state.service.options.preemption is False
    assert ran["http"] is NoDelayH11Protocol
    assert set(app.openapi()["paths"]) >= {"/k8s/scheduler/filter", "/k8s/scheduler/prioritize",
                                           "/k8s/scheduler/bind"}
    app.state.service.store.close()


def test_serve_kube_extender_without_credentials(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: None)
    r = cli("serve", "--kube-extender", "--kubeconfig", str(tmp_path / "missing"))
    assert r.exit_code == 2 and "cannot load Kubernetes credentials" in r.output


def test_serve_without_kube_has_no_extender(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: ran.update(app=app, **kw))
    assert cli("serve").exit_code == 0
    assert not any(path.startswith("/k8s") for path in ran["app"].openapi()["paths"])
    ran["app"].state.service.store.close()
