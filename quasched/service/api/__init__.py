"""The HTTP API: the FastAPI app, its routes, the docs page, the server that answers while it starts, and the dashboard."""
