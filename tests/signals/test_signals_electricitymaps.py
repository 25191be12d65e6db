"""Electricity Maps' client against a local server answering in the API's documented JSON: what it asks, how it reads
the answers, its cache and the 429's Retry-After."""

from __future__ import annotations

from email.utils import format_datetime
from datetime import datetime, timezone

import numpy as np
import pytest
from signal_api import T0, H, Answer, em_forecast, em_history, em_point

from quasched.signals import ElectricityMaps, LiveSignal, NoSignal
from quasched.signals.base import hour_of

NOW_H = hour_of(T0)  # 12:00
LATEST, FORECAST, HISTORY = (f"/v3/carbon-intensity/{e}" for e in ("latest", "forecast", "history"))


def client(api, clock, **options):
    return ElectricityMaps("secret-token", api.url, clock=clock, **options)


def serve_de(api):
    api.answer(LATEST, em_point("DE", NOW_H, 300.0))
    api.answer(FORECAST, em_forecast("DE", NOW_H, [999.0, 200.0, 100.0], updated=NOW_H + 600))


def test_hourly_is_the_latest_hour_then_the_forecast_then_its_last_value(api, clock):
    serve_de(api)
    reading = LiveSignal(client(api, clock), "DE").hourly(T0, 5)
    assert reading.start == NOW_H and reading.zone == "DE"
    assert reading.g_per_kwh.tolist() == [300.0, 200.0, 100.0, 100.0, 100.0]  # the latest value holds 12:00, not 999
    assert reading.issued == NOW_H + 600 and not reading.stale and reading.warning is None
    assert "Electricity Maps API" in reading.source and "ODbL" not in reading.source
    for request in api.requests:
        assert request.headers["auth-token"] == "secret-token"
        assert request.query == {"zone": "DE", "emissionFactorType": "direct"}
    assert [r.path for r in api.requests] == [LATEST, FORECAST]


def test_life_cycle_factors_and_latest_only(api, clock):
    api.answer(LATEST, em_point("DE", NOW_H, 321.0))
    reading = LiveSignal(client(api, clock, kind="lca", forecast=False), "DE").hourly(T0 + 2 * H, 3)
    assert reading.g_per_kwh.tolist() == [321.0] * 3 and reading.start == NOW_H + 2 * H
    assert [(r.path, r.query["emissionFactorType"]) for r in api.requests] == [(LATEST, "lifecycle")]
    with pytest.raises(ValueError, match="unknown intensity kind 'marginal'"):
        client(api, clock, kind="marginal")


def test_history_fills_the_hours_before_its_first_point_with_that_point(api, clock):
    api.answer(HISTORY, em_history("DE", NOW_H - 3 * H, [50.0, None, 70.0]))  # 09:00, 10:00 (no value), 11:00
    reading = LiveSignal(client(api, clock), "DE").history(T0, 5)  # 07:00 .. 11:00
    assert reading.start == NOW_H - 5 * H
    assert reading.g_per_kwh.tolist() == [50.0, 50.0, 50.0, 50.0, 70.0]
    assert reading.issued == NOW_H - H + 1500  # the newest updatedAt


def test_an_answer_for_another_zone_is_refused(api, clock):
    api.answer(LATEST, em_point("FR", NOW_H, 30.0))  # the API falls back to the caller's location for unknown zones
    with pytest.raises(NoSignal, match="unexpected latest answer.*zone 'FR'"):
        LiveSignal(client(api, clock), "DE").hourly(T0, 2)


def test_a_second_read_within_the_ttl_asks_nothing(api, clock):
    serve_de(api)
    signal = LiveSignal(client(api, clock, ttl_s=600), "DE")
    first = signal.hourly(T0, 3)
    clock.t += 599
    assert np.array_equal(signal.hourly(clock.t, 3).g_per_kwh, first.g_per_kwh) and len(api.requests) == 2
    clock.t += 1
    api.answer(LATEST, em_point("DE", NOW_H, 310.0))
    assert signal.hourly(clock.t, 1).g_per_kwh.tolist() == [310.0] and len(api.requests) == 4


@pytest.mark.parametrize("as_date", [False, True])
def test_a_429_holds_every_call_until_its_retry_after(api, clock, as_date):
    until = T0 + 120
    retry = format_datetime(datetime.fromtimestamp(until, timezone.utc), usegmt=True) if as_date else "120"
    api.answer(LATEST, Answer({"error": "too many requests"}, 429, {"Retry-After": retry}),
               em_point("DE", NOW_H, 300.0))
    api.answer(FORECAST, em_forecast("DE", NOW_H + H, [200.0], updated=NOW_H))
    signal = LiveSignal(client(api, clock, retry_s=0), "DE")
    with pytest.raises(NoSignal, match=r"rate limited \(HTTP 429\) until 2024-05-01T12:32:00Z"):
        signal.hourly(T0, 2)
    clock.t = until - 1
    with pytest.raises(NoSignal, match="rate limited"):
        signal.history(clock.t, 2)  # another endpoint is held too
    assert len(api.requests) == 1
    clock.t = until
    assert signal.hourly(clock.t, 2).g_per_kwh.tolist() == [300.0, 200.0] and len(api.requests) == 3
