"""Hourly grid carbon intensity per zone (Electricity Maps, ODbL 1.0).

The data directory holds ``carbon_intensity_2023_hourly.csv`` (one row per hour and zone:
``datetime_utc, zone, direct_gco2_per_kwh, lca_gco2_per_kwh, estimated``; see its README).
Like the trace loaders, the directory comes from an argument (``--carbon-dir``), then
``$QUASCHED_CARBON``; the file is not downloaded (it is a redistribution of Electricity
Maps' 2023 zone files, see :data:`ATTRIBUTION`).

Every result computed from these data must say so: print :data:`ATTRIBUTION` beside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.traces.errors import TraceError, TraceNotFound
from quasched.traces.table import read_table

ENV_VAR = "QUASCHED_CARBON"
FILE_NAME = "carbon_intensity_2023_hourly.csv"
COLUMNS = ("datetime_utc", "zone", "direct_gco2_per_kwh", "lca_gco2_per_kwh", "estimated")
#: to print beside every output computed from these data (ODbL 1.0 requires attribution)
ATTRIBUTION = ("Carbon intensity: Electricity Maps (electricitymaps.com), hourly 2023 zone data, "
               "Open Database License (ODbL 1.0)")
#: ``direct`` = operational intensity of consumed electricity; ``lca`` = life-cycle
INTENSITY_KINDS = ("direct", "lca")
ONE_HOUR = np.timedelta64(1, "h")


@dataclass(frozen=True)
class CarbonIntensity:
    """One zone's hourly intensity, gCO2eq/kWh: hour ``h`` starts at ``start + h`` hours (UTC)."""

    zone: str
    start: np.datetime64
    g_per_kwh: np.ndarray
    estimated: np.ndarray
    kind: str = "direct"
    source: str = ATTRIBUTION

    def __len__(self) -> int:
        return len(self.g_per_kwh)

    def hours_from(self, when: np.datetime64, hours: int) -> np.ndarray:
        """``hours`` hourly values from the hour holding ``when``, wrapping around the series
        (e.g. a trace longer than the year reuses it from its first hour)."""
        hour = np.asarray(when, dtype="datetime64[s]").astype("datetime64[h]")
        first = int((hour - np.asarray(self.start, dtype="datetime64[h]")) // ONE_HOUR)
        return self.g_per_kwh[(first + np.arange(hours)) % len(self.g_per_kwh)]


def resolve_carbon(carbon_dir: str | Path | None = None) -> Path:
    """Path of the intensity file: ``carbon_dir``, then ``$QUASCHED_CARBON`` (:class:`TraceNotFound` otherwise)."""
    dirs = [("--carbon-dir", Path(carbon_dir))] if carbon_dir else []
    if os.environ.get(ENV_VAR):
        dirs.append((ENV_VAR, Path(os.environ[ENV_VAR])))
    for _, folder in dirs:
        if (folder / FILE_NAME).is_file():
            return folder / FILE_NAME
    raise TraceNotFound(FILE_NAME, [f"{folder / FILE_NAME} ({origin})" for origin, folder in dirs] or ["(nowhere)"],
                        f"Fix: pass --carbon-dir DIR or set {ENV_VAR}=DIR, where DIR holds {FILE_NAME} "
                        "(e.g. ../shared/carbon).")


def _read(path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """The file's text cells (errors quote them as written) and each row's line in the file; read once
    while the file is unchanged (a federation reads every zone of it)."""
    path = path.resolve()  # the cache's key: the same file under another relative path or working folder
    stat = path.stat()
    return _read_file(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=1)
def _read_file(path: Path, mtime_ns: int, size: int) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`_read` of one version of the file (``mtime_ns`` and ``size`` only key the cache)."""
    table = read_table(path, COLUMNS)
    return pd.DataFrame({column: table.text(column) for column in COLUMNS}), table.lines


def carbon_zones(carbon_dir: str | Path | None = None) -> list[str]:
    """The zones in the intensity file, sorted."""
    return sorted(_read(resolve_carbon(carbon_dir))[0]["zone"].unique().tolist())


def load_carbon(zone: str, carbon_dir: str | Path | None = None, kind: str = "direct") -> CarbonIntensity:
    """One zone's hourly series; :class:`TraceError` naming the line of a gap, a repeat or a bad value."""
    if kind not in INTENSITY_KINDS:
        raise ValueError(f"unknown intensity kind {kind!r}; use {' or '.join(INTENSITY_KINDS)}")
    path = resolve_carbon(carbon_dir)
    frame, file_lines = _read(path)
    rows = np.flatnonzero((frame["zone"] == zone).to_numpy())
    if len(rows) == 0:
        raise TraceError(path, f"no zone {zone!r}; zones: {', '.join(sorted(frame['zone'].unique()))}",
                         field="zone")
    part, lines = frame.iloc[rows], file_lines[rows]
    times = pd.to_datetime(part["datetime_utc"], errors="coerce", format="ISO8601", utc=True)
    seconds = times.dt.tz_localize(None).to_numpy(dtype="datetime64[s]")
    hours = seconds.astype("datetime64[h]")
    _first_bad(path, part, lines, "datetime_utc", np.isnat(hours) | (seconds != hours),
               "a time on the hour such as 2023-01-01 00:00:00")
    column = f"{kind}_gco2_per_kwh"
    values = pd.to_numeric(part[column], errors="coerce").to_numpy(dtype=float)
    _first_bad(path, part, lines, column, ~(values >= 0) | ~np.isfinite(values), "a non-negative number of g/kWh")
    estimated = pd.to_numeric(part["estimated"], errors="coerce").to_numpy(dtype=float)
    _first_bad(path, part, lines, "estimated", ~np.isin(estimated, (0, 1)), "0 or 1")
    step = np.diff(hours) // ONE_HOUR
    bad = np.flatnonzero(step != 1)
    if len(bad):
        raise TraceError(path, f"zone {zone}: hour {hours[bad[0] + 1]} follows {hours[bad[0]]} (need one row per "
                         "hour, in order)", row=int(lines[bad[0] + 1]), field="datetime_utc")
    return CarbonIntensity(zone, hours[0], values, estimated.astype(bool), kind)


def _first_bad(path: Path, part: pd.DataFrame, lines: np.ndarray, field: str, bad: np.ndarray, want: str) -> None:
    """:class:`TraceError` naming the file line (of ``lines``) and ``field`` of the first ``bad`` value of ``part``."""
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(path, f"{part[field].iloc[i]!r} is not {want}", row=int(lines[i]), field=field)
