"""WattTime's client against a local server answering in the API's documented JSON: basic-auth login and bearer
token, a new login on a 401 and when the token is old, 5-minute MOER points averaged into hours in g/kWh, and the
0-100 index kept apart from intensities."""

from __future__ import annotations

import pytest
from signal_api import T0, H, Answer, wt_index, wt_points

from quasched.signals import Index, LiveSignal, NoSignal, Unavailable, WattTime
from quasched.signals.base import hour_of

NOW_H = hour_of(T0)
REGION = "CAISO_NORTH"
LOGIN, FORECAST, HISTORICAL, INDEX = "/login", "/v3/forecast", "/v3/historical", "/v3/signal-index"


def client(api, clock, **options):
    return WattTime("ada", "pw", api.url, clock=clock, **options)


def forecast_from_now():
    """12:30 .. 12:55 at 100 .. 600 lbs/MWh (mean 350), 13:00 .. 13:55 at 0 .. 110 (mean 55)."""
    return wt_points(REGION, T0, [100.0 * k for k in range(1, 7)] + [10.0 * k for k in range(12)], generated=T0 - 60)


def test_forecast_points_average_into_hours_in_g_per_kwh(api, clock):
    api.answer(LOGIN, {"token": "t1"})
    api.answer(FORECAST, forecast_from_now())
    reading = LiveSignal(client(api, clock), REGION).hourly(T0, 3)
    # 350 lbs/MWh × 0.45359237 g/kWh per lbs/MWh = 158.7573295; 55 × 0.45359237 = 24.94758035, then it continues
    assert reading.g_per_kwh.tolist() == pytest.approx([158.7573295, 24.94758035, 24.94758035], abs=1e-9)
    assert reading.start == NOW_H and reading.issued == T0 - 60 and "WattTime" in reading.source
    assert api.asked(LOGIN)[0].headers["authorization"] == "Basic YWRhOnB3"  # base64("ada:pw")
    asked = api.asked(FORECAST)[0]
    assert asked.headers["authorization"] == "Bearer t1"
    assert asked.query == {"region": REGION, "signal_type": "co2_moer"}


def test_history_asks_the_hours_before_now(api, clock):
    api.answer(LOGIN, {"token": "t1"})
    api.answer(HISTORICAL, wt_points(REGION, NOW_H - 2 * H, [1000.0] * 12 + [2000.0] * 12))
    reading = LiveSignal(client(api, clock), REGION).history(T0, 2)
    assert reading.start == NOW_H - 2 * H and reading.issued is None
    assert reading.g_per_kwh.tolist() == pytest.approx([453.59237, 907.18474], abs=1e-9)
    assert api.asked(HISTORICAL)[0].query == {"region": REGION, "signal_type": "co2_moer",
                                              "start": "2024-05-01T10:00:00Z", "end": "2024-05-01T12:00:00Z"}


def test_a_401_logs_in_again_once(api, clock):
    api.answer(LOGIN, {"token": "t1"}, {"token": "t2"})
    api.answer(FORECAST, Answer({"error": "token expired"}, 401), forecast_from_now())
    assert not LiveSignal(client(api, clock), REGION).hourly(T0, 1).stale
    assert len(api.asked(LOGIN)) == 2
    assert [r.headers["authorization"] for r in api.asked(FORECAST)] == ["Bearer t1", "Bearer t2"]


def test_an_old_token_is_renewed_before_the_call(api, clock):
    api.answer(LOGIN, {"token": "t1"}, {"token": "t2"})
    api.answer(FORECAST, forecast_from_now())
    signal = LiveSignal(client(api, clock), REGION)
    signal.hourly(T0, 1)
    clock.t += 26 * 60  # WattTime's tokens last 30 minutes; past our 25 and the cache's 15
    signal.hourly(clock.t, 1)
    assert [r.headers["authorization"] for r in api.asked(FORECAST)] == ["Bearer t1", "Bearer t2"]


def test_refused_login_and_other_units_say_so(api, clock):
    api.answer(LOGIN, Answer({"error": "bad credentials"}, 401))
    with pytest.raises(NoSignal, match="login refused .HTTP 401.: check WATTTIME_USERNAME and WATTTIME_PASSWORD"):
        LiveSignal(client(api, clock), REGION).hourly(T0, 1)
    api.answer(LOGIN, {"token": "t1"})
    api.answer(FORECAST, wt_points(REGION, T0, [1.0], units="kg_co2_per_mwh"))
    with pytest.raises(NoSignal, match="units 'kg_co2_per_mwh', not lbs_co2_per_mwh"):
        LiveSignal(client(api, clock), REGION).hourly(T0, 1)


def test_the_index_is_a_percentile_not_an_intensity(api, clock):
    api.answer(LOGIN, {"token": "t1"})
    api.answer(INDEX, wt_index(REGION, NOW_H + 1500, 37.0), wt_index(REGION, NOW_H + 1800, 150.0))
    watttime = client(api, clock, ttl_s=0)
    assert watttime.index(REGION) == Index(REGION, 37.0, NOW_H + 1500)
    assert api.asked(INDEX)[0].query == {"region": REGION, "signal_type": "co2_moer"}
    with pytest.raises(Unavailable, match="150 is not a percentile"):
        watttime.index(REGION)
