"""A local HTTP server answering like a carbon-signal provider (scripted answers per path, every request kept), a
settable clock, and the providers' documented JSON shapes, written out here."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from quasched.signals.base import epoch


@dataclass
class Answer:
    """``body``: JSON-able, or bytes sent as they are; ``hold``: wait for it (at most 10 s) before answering."""

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased


class FakeApi:
    """On 127.0.0.1, a free port. :meth:`answer` scripts a path's answers (in order, the last repeated); unscripted
    paths are 404."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Answer]] = {}
        self.requests: list[Request] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                api.requests.append(Request(url.path, dict(parse_qsl(url.query)),
                                            {k.lower(): v for k, v in self.headers.items()}))
                script = api.routes.get(url.path) or [Answer({"error": "not found"}, 404)]
                answer = script.pop(0) if len(script) > 1 else script[0]
                if answer.hold is not None:
                    answer.hold.wait(10)
                body = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                for name, value in {"Content-Type": "application/json", **answer.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, *answers: Answer | Any) -> None:
        self.routes[path] = [a if isinstance(a, Answer) else Answer(a) for a in answers]

    def asked(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    def stop(self) -> None:
        """Close the port: further calls are refused."""
        self.server.shutdown()
        self.server.server_close()


class Clock:
    """Epoch seconds, set by the test."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


T0 = epoch("2024-05-01T12:30:00Z")  # the tests' "now": half past the hour
H = 3600


def at(t: float) -> str:
    """Epoch s as Electricity Maps writes times, e.g. ``2024-05-01T12:00:00.000Z``."""
    from datetime import datetime, timezone
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def em_point(zone: str, t: float, value: float | None) -> dict:
    """One hour of Electricity Maps' ``latest`` (and of ``history``'s list)."""
    return {"zone": zone, "carbonIntensity": value, "datetime": at(t), "updatedAt": at(t + 1500),
            "createdAt": at(t - 600), "emissionFactorType": "direct", "isEstimated": False, "estimationMethod": None}


def em_forecast(zone: str, first: float, values: list[float], updated: float) -> dict:
    return {"zone": zone, "forecast": [{"carbonIntensity": v, "datetime": at(first + k * H)}
                                       for k, v in enumerate(values)], "updatedAt": at(updated)}


def em_history(zone: str, first: float, values: list[float | None]) -> dict:
    return {"zone": zone, "history": [em_point(zone, first + k * H, v) for k, v in enumerate(values)]}


def wt_points(region: str, first: float, values: list[float], generated: float | None = None,
              units: str = "lbs_co2_per_mwh") -> dict:
    """WattTime's ``forecast`` / ``historical`` shape: 5-minute points from ``first``."""
    meta: dict[str, Any] = {"region": region, "signal_type": "co2_moer", "model": {"date": "2023-03-01"},
                            "units": units, "data_point_period_seconds": 300, "warnings": []}
    if generated is not None:
        meta |= {"generated_at_period_seconds": 300, "generated_at": at(generated).replace(".000Z", "+00:00")}
    data = [{"point_time": at(first + 300 * k).replace(".000Z", "+00:00"), "value": v} for k, v in enumerate(values)]
    return {"data": data, "meta": meta}


def wt_index(region: str, t: float, percent: float) -> dict:
    return {"data": [{"point_time": at(t).replace(".000Z", "+00:00"), "value": percent}],
            "meta": {"region": region, "signal_type": "co2_moer", "units": "percentile",
                     "data_point_period_seconds": 300, "model": {"date": "2023-03-01"}, "warnings": []}}
