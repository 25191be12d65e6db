"""WattTime API v3: a region's marginal operating emissions rate (MOER, ``co2_moer``), its forecast and past hours, and
its 0-100 index. ``GET /login`` with HTTP basic auth gives a token (valid 30 minutes) for ``Authorization: Bearer``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quasched.signals.base import Series, Unavailable, epoch, iso
from quasched.signals.provider import Provider, Refused, credential, parsing

BASE_URL = "https://api.watttime.org"
USERNAME, PASSWORD = "WATTTIME_USERNAME", "WATTTIME_PASSWORD"
UNITS = "lbs_co2_per_mwh"
#: lbs CO2 per MWh -> g per kWh: 453.59237 g per lb / 1000 kWh per MWh
G_PER_KWH = 0.45359237
#: a token is used this long, s (WattTime's last 30 minutes); a 401 renews it sooner
TOKEN_S = 25 * 60.0


@dataclass(frozen=True)
class Index:
    """WattTime's ``signal-index``: where the region's current MOER ranks among its recent values, 0-100 (a
    percentile, not an intensity), at ``time`` (epoch s)."""

    region: str
    percent: float
    time: float


class WattTime(Provider):
    """The API at ``base_url`` as ``username`` with ``password`` (default: ``$WATTTIME_USERNAME`` and
    ``$WATTTIME_PASSWORD``, each else the file its ``..._FILE`` names). Zones are WattTime regions (e.g.
    ``CAISO_NORTH``); the 5-minute MOER points are averaged into hours and converted to g/kWh. ``options``:
    :class:`~quasched.signals.provider.Provider`'s."""

    name = "watttime"
    source = "Marginal emissions (MOER): WattTime API (watttime.org), data under WattTime's terms"

    def __init__(self, username: str | None = None, password: str | None = None, base_url: str = BASE_URL,
                 **options: Any) -> None:
        self.username, self.password = username or credential(USERNAME), password or credential(PASSWORD)
        self._token: tuple[str, float] | None = None
        super().__init__(base_url, **options)

    def _headers(self) -> dict[str, str]:
        now = self.clock()
        if self._token is None or now - self._token[1] >= TOKEN_S:
            try:
                answer = self._call("/login", {}, {}, auth=(self.username, self.password))
            except Refused:
                raise Unavailable(f"login refused (HTTP 401): check {USERNAME} and {PASSWORD}") from None
            with parsing("login"):
                if not isinstance(answer["token"], str) or not answer["token"]:
                    raise ValueError("no token")
                self._token = (answer["token"], now)
        return {"Authorization": f"Bearer {self._token[0]}"}

    def _renew(self) -> bool:
        self._token = None
        return True

    def _moer(self, path: str, region: str, **params: str) -> Series:
        answer = self.get(path, region=region, signal_type="co2_moer", **params)
        with parsing(path):
            meta = answer["meta"]
            if meta["units"] != UNITS:
                raise ValueError(f"units {meta['units']!r}, not {UNITS}")
            if meta.get("region", region) != region:
                raise ValueError(f"it is region {meta['region']!r}'s")
            points = answer["data"]
            issued = epoch(meta["generated_at"]) if meta.get("generated_at") else None
            return Series.of([epoch(p["point_time"]) for p in points], [G_PER_KWH * float(p["value"]) for p in points],
                             issued)

    def forecast(self, zone: str) -> Series:
        return self._moer("/v3/forecast", zone)

    def history(self, zone: str, start: int, end: int) -> Series:
        return self._moer("/v3/historical", zone, start=iso(start), end=iso(end))

    def index(self, region: str) -> Index:
        """The region's current index; :class:`~quasched.signals.base.Unavailable` if there is none."""
        answer = self.get("/v3/signal-index", region=region, signal_type="co2_moer")
        with parsing("/v3/signal-index"):
            point = answer["data"][0]
            percent = float(point["value"])
            if not 0 <= percent <= 100:
                raise ValueError(f"{percent:g} is not a percentile")
            return Index(region, percent, epoch(point["point_time"]))
