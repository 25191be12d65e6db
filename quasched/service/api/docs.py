"""The API's reference at ``/docs``: Swagger UI served from this server (the assets the ``fastapi-offline``
package ships, under ``/docs/assets``; the page's start-up script from the dashboard's folder), so that it works
offline and under a Content-Security-Policy that allows only this origin (no inline script, no CDN)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: where the Swagger UI assets are served
ASSETS = "/docs/assets"

PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>quasched API</title>
<link rel="stylesheet" href="{ASSETS}/swagger-ui.css">
<link rel="icon" href="{ASSETS}/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ASSETS}/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script>
</body>
</html>
"""


def add_docs(app: FastAPI) -> None:
    """Serve Swagger UI on the app's OpenAPI document at ``/docs``, with its assets from this server."""
    import fastapi_offline

    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount(ASSETS, StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-cache"})
