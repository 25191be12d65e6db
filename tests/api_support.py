"""Shared pieces of the service API tests: a small cluster, a settable clock, apps on a tmp
SQLite database, and a real uvicorn server on 127.0.0.1 in a thread (no network beyond loopback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from quasched.model.nodes import NodeSpec

#: a0, a1: 8 × A100; t0: 2 × T4; c0: CPU only
NODES = (("a0", 96_000, 768 * 1024, 8, "A100"), ("a1", 96_000, 768 * 1024, 8, "A100"),
         ("t0", 32_000, 128 * 1024, 2, "T4"), ("c0", 64_000, 256 * 1024, 0, ""))


def small_cluster() -> NodeSpec:
    return NodeSpec(
        name=np.array([n[0] for n in NODES], dtype=object),
        cpu_milli=np.array([n[1] for n in NODES], dtype=np.int64),
        memory_mib=np.array([n[2] for n in NODES], dtype=np.int64),
        num_gpus=np.array([n[3] for n in NODES], dtype=np.int64),
        gpu_model=np.array([n[4] for n in NODES], dtype=object),
    )


class Clock:
    """A clock tests move by hand."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def db_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'quasched.db'}"


def make_app(tmp: Path, clock: Any = None, **kw: Any) -> tuple[Any, str]:
    """An app on ``tmp/quasched.db`` with the small cluster; (app, admin token). ``kube=KubeOptions(...)`` mounts
    the kube-scheduler extender."""
    from quasched.service.api.app import create_app

    kw.setdefault("cluster", small_cluster())
    if "kube" in kw:
        from quasched.kube.mount import extender

        kw["extensions"] = [extender(kw.pop("kube"))]
    app = create_app(db_url(tmp), clock=clock or Clock(), **kw)
    token = (tmp / "quasched.token").read_text().strip()
    return app, token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def job_body(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "train", "team": "default", "cpu": 4, "memory": "16GiB", "gpus": 1}
    body.update(kw)
    return body


def live_server(app: Any, tls: tuple[Path, Path] | None = None) -> Any:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; the context yields its base URL."""
    from quasched.service.api.serving import serving

    return serving(app, tls)
