"""Electricity Maps API v3: a zone's average carbon intensity of consumed electricity, the latest hour, the forecast
and the past 24 hours (``GET /v3/carbon-intensity/{latest,forecast,history}?zone=Z``, header ``auth-token``)."""

from __future__ import annotations

from typing import Any

from quasched.signals.base import Series, epoch, hour_of
from quasched.signals.provider import Provider, credential, parsing

BASE_URL = "https://api.electricitymaps.com"
TOKEN = "ELECTRICITYMAPS_API_TOKEN"
#: our intensity kinds (:data:`quasched.traces.carbon.INTENSITY_KINDS`) -> the API's ``emissionFactorType``
FACTORS = {"direct": "direct", "lca": "lifecycle"}


class ElectricityMaps(Provider):
    """The API at ``base_url`` with ``token`` (default: ``$ELECTRICITYMAPS_API_TOKEN``, else the file
    ``$ELECTRICITYMAPS_API_TOKEN_FILE`` names). ``kind``: ``direct`` (operational, as the simulation reads by
    default) or ``lca`` (life-cycle) emission factors; ``forecast=False`` asks only ``latest`` (plans without the
    forecast: its value then continues). ``options``: :class:`~quasched.signals.provider.Provider`'s."""

    name = "electricitymaps"
    source = "Carbon intensity: Electricity Maps API (electricitymaps.com), live data under Electricity Maps' terms"

    def __init__(self, token: str | None = None, base_url: str = BASE_URL, *, kind: str = "direct",
                 forecast: bool = True, **options: Any) -> None:
        if kind not in FACTORS:
            raise ValueError(f"unknown intensity kind {kind!r}; use {' or '.join(FACTORS)}")
        self.token = token or credential(TOKEN)
        self.factor, self.with_forecast = FACTORS[kind], forecast
        super().__init__(base_url, **options)

    def _headers(self) -> dict[str, str]:
        return {"auth-token": self.token}

    def _ask(self, endpoint: str, zone: str) -> dict:
        """The zone's answer from ``endpoint``, checked to be that zone's (the API may answer for the caller's IP)."""
        answer = self.get(f"/v3/carbon-intensity/{endpoint}", zone=zone, emissionFactorType=self.factor)
        with parsing(endpoint):
            if answer["zone"] != zone:
                raise ValueError(f"it is zone {answer['zone']!r}'s")
        return answer

    def forecast(self, zone: str) -> Series:
        latest = self._ask("latest", zone)
        with parsing("latest"):
            points = [(epoch(latest["datetime"]), float(latest["carbonIntensity"]))]
            issued = epoch(latest["updatedAt"])
        if self.with_forecast:
            answer = self._ask("forecast", zone)
            with parsing("forecast"):
                held = hour_of(points[0][0])  # the latest value holds its hour
                points += [(epoch(p["datetime"]), float(p["carbonIntensity"])) for p in answer["forecast"]
                           if p["carbonIntensity"] is not None and hour_of(epoch(p["datetime"])) != held]
                issued = epoch(answer["updatedAt"])
        with parsing("forecast" if self.with_forecast else "latest"):
            return Series.of([t for t, _ in points], [v for _, v in points], issued)

    def history(self, zone: str, start: int, end: int) -> Series:
        """The past 24 hours the endpoint keeps (``start`` and ``end`` are not asked: older hours take the first)."""
        answer = self._ask("history", zone)
        with parsing("history"):
            points = [p for p in answer["history"] if p["carbonIntensity"] is not None]
            issued = max((epoch(p["updatedAt"]) for p in points if p.get("updatedAt")), default=None)
            return Series.of([epoch(p["datetime"]) for p in points], [float(p["carbonIntensity"]) for p in points],
                             issued)
