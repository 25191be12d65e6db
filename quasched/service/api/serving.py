"""An ASGI app served by uvicorn on a free 127.0.0.1 port in a thread (the front's virtual members, tests)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def serving(app: Any, tls: tuple[Path, Path] | None = None, start_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its URL (``https`` with ``tls``: a certificate and its key)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False,
                                           timeout_graceful_shutdown=1,
                                           ssl_certfile=None if tls is None else str(tls[0]),
                                           ssl_keyfile=None if tls is None else str(tls[1])))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    try:
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
