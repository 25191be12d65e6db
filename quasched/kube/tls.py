"""The extender verbs on their own mutual-TLS listener (docs/kubernetes.md, "Authenticated verbs").

``quasched serve --kube-extender`` runs two uvicorn servers on one app in one event loop: the service
(API, dashboard, metrics) on ``--port`` as before, and an HTTPS listener that accepts only clients
presenting a certificate signed by the configured CA (kube-scheduler's ``tlsConfig.certFile``). The
verbs answer on that listener only (:attr:`~.extender.KubeOptions.verbs_port`). The app's lifespan
(the cluster sync) runs once, in the service's server.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quasched.kube.nodelay import NoDelayHttpToolsProtocol


@dataclass(frozen=True)
class VerbsTLS:
    """Where the verbs listen and with which certificates: ``cert``/``key`` the server's, ``client_ca`` the CA
    that signs the clients' (kube-scheduler's) certificates."""

    host: str
    port: int
    cert: Path
    key: Path
    client_ca: Path

    def check(self) -> None:
        """Load the files once (``ssl.SSLError``/``OSError`` naming the problem before any server starts)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.client_ca))
        context.load_cert_chain(str(self.cert), str(self.key))


def configs(app: Any, tls: VerbsTLS) -> list[Any]:
    """uvicorn configurations: the service's, then the verbs' mutual-TLS listener's (no lifespan); httptools'
    parser (C) with TCP_NODELAY and no access log, as ``quasched serve`` runs without the verbs listener."""
    import uvicorn

    common: dict[str, Any] = dict(log_level="warning", timeout_graceful_shutdown=2, access_log=False,
                                  http=NoDelayHttpToolsProtocol)
    return [uvicorn.Config(app, **common),
            uvicorn.Config(app, lifespan="off", ssl_certfile=str(tls.cert), ssl_keyfile=str(tls.key),
                           ssl_ca_certs=str(tls.client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED, **common)]


def run(app: Any, service: socket.socket, verbs: socket.socket, tls: VerbsTLS) -> None:
    """Serve the service on the listening socket ``service`` and the verbs on ``verbs`` until a signal (or either
    server's failure) stops both, on uvloop's event loop (uvicorn's choice when it runs one server)."""
    import uvicorn
    import uvloop

    servers = [uvicorn.Server(config) for config in configs(app, tls)]

    async def both() -> None:
        tasks = [asyncio.ensure_future(server.serve(sockets=[sock])) for server, sock in zip(servers, (service, verbs))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(both())
