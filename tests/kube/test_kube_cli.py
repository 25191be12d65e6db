"""`quasched serve --kube-extender`: credentials, the extender mounted, preemption off, TCP_NODELAY (uvicorn stubbed)."""

from __future__ import annotations

from typing import Any

import pytest
from extra import requires
from kube_cluster import extender_certs, free_port
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


@requires("kubernetes", "kube")
def test_serve_kube_extender_plain_http(tmp_path, monkeypatch):
    from quasched.kube.nodelay import NoDelayHttpToolsProtocol

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ran = {}
    monkeypatch.setattr("uvicorn.Server.run", lambda server, sockets: ran.update(app=server.config.app.build(),
                                                                                 http=server.config.http))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    port = free_port()
    r = cli("serve", "--port", str(port), "--kube-extender", "--kubeconfig", str(tmp_path / "kubeconfig"),
            "--kube-plain-http")
    assert r.exit_code == 0, r.output
    assert f"urlPrefix http://127.0.0.1:{port}/k8s/scheduler" in r.output and "UNAUTHENTICATED" in r.output
    assert "0 nodes" in r.output
    app = ran["app"]
    assert app.state.kube.sync is not None and app.state.kube.client is not None
    assert app.state.kube.options.verbs_port is None and app.state.kube.options.lease is None
    # the loop places no pod here, so it preempts nothing; the extender preempts for GPU pods
    assert app.state.service.options.preemption is False and app.state.kube.options.preemption is True
    assert ran["http"] is NoDelayHttpToolsProtocol
    assert {p for p in app.openapi()["paths"] if p.startswith("/k8s/")} == {
        "/k8s/scheduler/filter", "/k8s/scheduler/bind", "/k8s/scheduler/preempt"}
    app.state.service.store.close()


@requires("kubernetes", "kube")
def test_serve_kube_extender_mutual_tls(tmp_path, monkeypatch):
    """The verbs get their own HTTPS listener that requires a client certificate signed by the given CA."""
    import ssl


    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ran = {}
    monkeypatch.setattr("quasched.kube.tls.run", lambda app, service, verbs, tls: ran.update(
        app=app.build(), tls=tls, verbs=verbs.getsockname()))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    pki = extender_certs(tmp_path / "pki")
    port = free_port()
    r = cli("serve", "--port", str(free_port()), "--kube-extender", "--kubeconfig", str(tmp_path / "kubeconfig"),
            "--kube-tls-port", str(port),
            "--kube-tls-cert", str(pki / "server.crt"), "--kube-tls-key", str(pki / "server.key"),
            "--kube-client-ca", str(pki / "ca.crt"), "--kube-lease", "quasched/quasched-scheduler",
            "--kube-scheduler-identity", "replica-a")
    assert r.exit_code == 0, r.output
    assert f"urlPrefix https://127.0.0.1:{port}/k8s/scheduler (filter, bind, mutual TLS)" in r.output
    assert ran["verbs"] == ("127.0.0.1", port)
    assert "Lease quasched/quasched-scheduler is held by replica-a_*" in r.output
    options = ran["app"].state.kube.options
    assert (options.verbs_port, options.lease, options.identity) == (port, "quasched/quasched-scheduler", "replica-a")
    from quasched.kube.nodelay import NoDelayHttpToolsProtocol
    from quasched.kube.tls import configs

    service, verbs = configs(ran["app"], ran["tls"])
    assert service.ssl_certfile is None and service.lifespan != "off"
    assert verbs.lifespan == "off" and verbs.ssl_cert_reqs == ssl.CERT_REQUIRED
    assert verbs.ssl_ca_certs == str(pki / "ca.crt")
    assert service.http is verbs.http is NoDelayHttpToolsProtocol and not verbs.access_log
    ran["app"].state.service.store.close()


@requires("kubernetes", "kube")
def test_serve_kube_extender_needs_certificates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr("uvicorn.Server.run", lambda server, sockets: None)
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    def serve(*extra: str) -> Any:
        return cli("serve", "--port", str(free_port()), "--kube-extender", "--kubeconfig",
                   str(tmp_path / "kubeconfig"), *extra)

    r = serve()
    assert r.exit_code == 2 and "give --kube-tls-cert, --kube-tls-key, --kube-client-ca" in r.output
    (tmp_path / "junk.pem").write_text("not a certificate")
    junk = str(tmp_path / "junk.pem")
    r = serve("--kube-tls-cert", junk, "--kube-tls-key", junk, "--kube-client-ca", junk)
    assert r.exit_code == 2 and "cannot load" in r.output
    r = serve("--kube-plain-http", "--kube-lease", "no-slash")
    assert r.exit_code == 2 and "NAMESPACE/NAME" in r.output


def test_serve_kube_extender_without_credentials(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr("uvicorn.Server.run", lambda server, sockets: None)
    r = cli("serve", "--port", str(free_port()), "--kube-extender", "--kubeconfig", str(tmp_path / "missing"),
            "--kube-plain-http")
    assert r.exit_code == 2 and "cannot load Kubernetes credentials" in r.output


def test_serve_without_kube_has_no_extender(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = {}
    monkeypatch.setattr("uvicorn.Server.run", lambda server, sockets: ran.update(app=server.config.app.build(),
                                                                                 http=server.config.http))
    assert cli("serve", "--port", str(free_port())).exit_code == 0
    assert not any(path.startswith("/k8s") for path in ran["app"].openapi()["paths"])
    ran["app"].state.service.store.close()
