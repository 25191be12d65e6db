"""The offline file as a signal reads what the simulation reads: ``CarbonIntensity.hours_from`` at the same instant,
for any clock (wrapping around the file's year), with the file's ODbL attribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from signal_api import T0

from quasched.signals import FileSignal
from quasched.signals.base import epoch
from quasched.traces.carbon import ATTRIBUTION, FILE_NAME, load_carbon

NOWS = [epoch("2023-01-01T00:00:00Z"), epoch("2023-06-01T13:45:10Z"), epoch("2023-12-31T23:59:59Z"), T0]


def reads_as_the_simulation(zone: str, folder: Path, hours: int) -> FileSignal:
    signal, series = FileSignal(load_carbon(zone, folder)), load_carbon(zone, folder)
    for now in NOWS:
        ahead, before = signal.hourly(now, hours), signal.history(now, hours)
        assert np.array_equal(ahead.g_per_kwh, series.hours_from(np.datetime64(int(now), "s"), hours))
        assert np.array_equal(before.g_per_kwh, series.hours_from(np.datetime64(int(now) - 3600 * hours, "s"), hours))
        assert ahead.start == int(now) // 3600 * 3600 == before.start + 3600 * hours
        assert ahead.source == before.source == ATTRIBUTION and ahead.issued is None and not ahead.stale
    return signal


def test_a_small_file_wraps_like_the_simulation(tmp_path):
    rows = [f"2023-01-01 {h:02d}:00:00,XX,{10.0 + h},{20.0 + h},0" for h in range(24)]
    (tmp_path / FILE_NAME).write_text("datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated\n"
                                      + "\n".join(rows) + "\n")
    signal = reads_as_the_simulation("XX", tmp_path, 30)
    assert signal.hourly(epoch("2023-01-01T22:30:00Z"), 4).g_per_kwh.tolist() == [32.0, 33.0, 10.0, 11.0]
    assert signal.history(epoch("2023-01-01T01:10:00Z"), 3).g_per_kwh.tolist() == [32.0, 33.0, 10.0]


@pytest.mark.parametrize("zone", ["DE-LU", "US-CAL-CISO"])
def test_the_shared_file_reads_as_the_simulation(carbon_dir, zone):
    reads_as_the_simulation(zone, carbon_dir, 168)
