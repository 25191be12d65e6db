"""The kube-scheduler extender as an extension of the service's app (:func:`quasched.service.api.app.create_app`)."""

from __future__ import annotations

from fastapi import FastAPI

from quasched.kube.extender import Bridge, KubeOptions, router
from quasched.kube.sync import Sync
from quasched.service.api.app import Extension
from quasched.service.runtime.service import Service


def extender(options: KubeOptions) -> Extension:
    """The extension that mounts the extender's routes (``app.state.kube`` is its :class:`~.extender.Bridge`) and,
    with ``options.sync``, mirrors the API server's nodes and GPU pods while the app runs."""

    def mount(app: FastAPI, service: Service) -> Sync | None:
        bridge = Bridge(service, options)
        app.include_router(router(bridge))
        app.state.kube = bridge
        if not options.sync or options.client is None:
            return None
        bridge.sync = sync = Sync(bridge, options.client, options.resync_s)
        return sync

    return mount
