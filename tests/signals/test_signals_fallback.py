"""A live signal never fails once it has had a good answer: a refused connection, a 5xx, a timeout, malformed JSON, an
oversized answer or an old forecast serve the last good one, marked stale with a warning, logged once per change of
state; with none yet, a fallback signal serves, or NoSignal says why."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from signal_api import T0, H, Answer, em_point

from quasched.signals import ElectricityMaps, FileSignal, LiveSignal, NoSignal
from quasched.signals.base import hour_of
from quasched.traces.carbon import ATTRIBUTION, CarbonIntensity

NOW_H = hour_of(T0)
LATEST = "/v3/carbon-intensity/latest"


def live(api, clock, max_age_s=3 * H, **options):
    """Electricity Maps' latest hour only, asked at every read (no cache, no pause after a failure)."""
    return LiveSignal(ElectricityMaps("token", api.url, clock=clock, forecast=False, ttl_s=0, retry_s=0, **options),
                      "DE", max_age_s=max_age_s)


def logged(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_each_failure_serves_the_last_good_answer_and_each_change_is_logged_once(api, clock, capsys):
    signal = live(api, clock)
    api.answer(LATEST, em_point("DE", NOW_H, 300.0))
    assert signal.hourly(T0, 2).g_per_kwh.tolist() == [300.0, 300.0] and logged(capsys) == []

    api.answer(LATEST, Answer({"error": "internal"}, 500))
    for _ in range(2):
        reading = signal.hourly(T0, 2)
        assert reading.stale and reading.g_per_kwh.tolist() == [300.0, 300.0]
    assert reading.warning == ("electricitymaps DE: GET /v3/carbon-intensity/latest: HTTP 500; serving the last good "
                               "forecast (issued 2024-05-01T12:25:00Z)")
    api.answer(LATEST, Answer(b'{"zone": "DE", "carbonIntensity": '))
    assert "the answer is not JSON; serving the last good forecast" in signal.hourly(T0, 1).warning
    api.answer(LATEST, Answer({"zone": "DE", "carbonIntensity": "n/a"}))
    assert "unexpected latest answer" in signal.hourly(T0, 1).warning
    api.answer(LATEST, em_point("DE", NOW_H, 310.0))
    reading = signal.hourly(T0, 1)
    assert not reading.stale and reading.warning is None and reading.g_per_kwh.tolist() == [310.0]
    api.stop()
    reading = signal.hourly(T0, 1)
    assert reading.stale and "ConnectError" in reading.warning and reading.g_per_kwh.tolist() == [310.0]
    lines = logged(capsys)
    assert len(lines) == 5 and all(line.startswith("quasched signals: electricitymaps DE: ") for line in lines)
    assert [("HTTP 500" in lines[0]), ("not JSON" in lines[1]), ("unexpected" in lines[2]),
            lines[3].endswith("the forecast is good again"), ("ConnectError" in lines[4])] == [True] * 5


def test_an_old_forecast_is_not_good(api, clock):
    api.answer(LATEST, em_point("DE", NOW_H, 300.0))
    signal = live(api, clock)
    signal.hourly(T0, 1)
    clock.t = T0 + 4 * H  # 16:30: the 12:00 hour ended 3.5 h ago
    reading = signal.hourly(clock.t, 2)
    assert reading.stale and reading.start == NOW_H + 4 * H and reading.g_per_kwh.tolist() == [300.0, 300.0]
    assert "its newest hour, 2024-05-01T12:00:00Z, ended more than 3 h before now" in reading.warning
    with pytest.raises(NoSignal, match="ended more than 3 h before now; no good forecast yet"):
        live(api, clock).hourly(clock.t, 1)
    assert not live(api, clock, max_age_s=4 * H).hourly(clock.t, 1).stale


def test_a_timeout_and_an_oversized_answer_serve_the_last_good_answer(api, clock):
    api.answer(LATEST, em_point("DE", NOW_H, 300.0))
    signal = live(api, clock, timeout_s=0.2, max_bytes=1000)
    signal.hourly(T0, 1)
    hold = threading.Event()
    try:
        api.answer(LATEST, Answer(em_point("DE", NOW_H, 1.0), hold=hold))
        reading = signal.hourly(T0, 1)
        assert reading.stale and "no answer within 0.2 s" in reading.warning and reading.g_per_kwh.tolist() == [300.0]
    finally:
        hold.set()
    api.answer(LATEST, {**em_point("DE", NOW_H, 1.0), "padding": "x" * 2000})
    reading = signal.hourly(T0, 1)
    assert reading.stale and "the answer exceeds 1,000 bytes" in reading.warning


def test_a_failed_query_is_not_asked_again_for_retry_s(api, clock):
    api.answer(LATEST, Answer({"error": "unavailable"}, 503))
    signal = LiveSignal(ElectricityMaps("token", api.url, clock=clock, forecast=False, retry_s=60), "DE")
    for t in (T0, T0 + 59):
        with pytest.raises(NoSignal, match="HTTP 503; no good forecast yet"):
            signal.hourly(t, 1)
    assert len(api.requests) == 1
    clock.t = T0 + 60
    api.answer(LATEST, em_point("DE", NOW_H, 300.0))
    assert signal.hourly(clock.t, 1).g_per_kwh.tolist() == [300.0] and len(api.requests) == 2


def test_with_no_good_answer_yet_the_fallback_serves(api, clock):
    year = CarbonIntensity("DE", np.datetime64("2023-01-01T00", "h"), np.arange(8760.0), np.zeros(8760, bool))
    fallback = FileSignal(year)
    api.answer(LATEST, Answer({"error": "internal"}, 500))
    signal = LiveSignal(ElectricityMaps("token", api.url, clock=clock, forecast=False), "DE", fallback=fallback)
    for read in ("hourly", "history"):
        reading, offline = getattr(signal, read)(T0, 3), getattr(fallback, read)(T0, 3)
        assert reading.stale and reading.source == ATTRIBUTION == offline.source
        assert np.array_equal(reading.g_per_kwh, offline.g_per_kwh) and reading.start == offline.start
        assert "no good" in reading.warning and reading.warning.endswith("yet, serving the fallback signal")
