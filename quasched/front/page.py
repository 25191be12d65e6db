"""The front's dashboard (docs/federation.md, "The front's dashboard"): one page at ``/`` showing the zones (intensity
× PUE now and the next 24 h the front holds, any signal warning), the members, the jobs (where and when each goes,
and why) and the carbon the ended jobs saved against their baselines.

The page (``dashboard/``) is served as ``serve``'s is (:func:`~quasched.service.api.app.add_dashboard`): its files
under ``/static/front/``, ``serve``'s dashboard modules it imports (the token, the API client, the formats, the
charts) under ``/static/``, with the same security headers (:class:`~quasched.service.api.app.DashboardHeaders`:
this origin's scripts only). The page needs no token; it asks for one, as ``serve``'s does, and reads the API with
it."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from quasched.front.front import Front
from quasched.service.api.app import DashboardHeaders, add_dashboard

#: the page's own files
PAGE = Path(__file__).parent / "dashboard"


def add_page_routes(app: FastAPI, front: Front) -> None:
    """Serve the dashboard of ``front`` on ``app``: the page at ``/``, its assets under ``/static/`` (the API docs
    at ``/docs`` keep FastAPI's page, without the dashboard's headers)."""
    add_dashboard(app, PAGE / "index.html", [("/static/front", PAGE)])
    app.add_middleware(DashboardHeaders, pages=("/",), prefixes=("/static/",))
