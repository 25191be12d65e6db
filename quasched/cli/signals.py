"""``quasched carbon-signal``: a zone's carbon intensity now and for the next hours, live or from the offline file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import typer

from quasched.cli.common import console, fail

if TYPE_CHECKING:
    from quasched.signals import WattTime

Source = Literal["electricitymaps", "watttime", "file"]


def carbon_signal(
    source: Source = typer.Option(..., help="electricitymaps (average intensity), watttime (marginal emissions, "
                                  "MOER) or file (the offline 2023 hourly file)."),
    zone: str = typer.Option(..., help="Zone (electricitymaps, file: e.g. DE) or WattTime region (e.g. CAISO_NORTH)."),
    hours: int = typer.Option(24, min=1, max=168, help="Hours to print, from the current one."),
    base_url: Optional[str] = typer.Option(None, help="API base URL of a live source (default: its public API)."),
    carbon_dir: Optional[Path] = typer.Option(None, help="For --source file: folder of "
                                              "carbon_intensity_2023_hourly.csv (else $QUASCHED_CARBON). Data: "
                                              "Electricity Maps (ODbL)."),
) -> None:
    """Print a zone's carbon intensity, gCO2eq/kWh, for the current hour and the next ones: live from Electricity Maps
    or WattTime, or from the offline file.

    Credentials: $ELECTRICITYMAPS_API_TOKEN, or $WATTTIME_USERNAME and $WATTTIME_PASSWORD (each also as ..._FILE, the
    path of a file holding it). The file source maps the current time onto its year as the simulation does (hours
    since its first, wrapping). docs/federation.md, "Live carbon signals"."""
    import time
    from contextlib import closing

    from rich.table import Table

    from quasched.signals import ElectricityMaps, FileSignal, LiveSignal, SignalError, WattTime
    from quasched.signals.base import iso
    from quasched.traces.carbon import load_carbon
    from quasched.traces.errors import TraceError

    now, note = time.time(), None
    try:
        if source == "file":
            reading = FileSignal(load_carbon(zone, carbon_dir)).hourly(now, hours)
        else:
            options: dict[str, Any] = {"base_url": base_url} if base_url else {}
            live = ElectricityMaps if source == "electricitymaps" else WattTime
            with closing(live(**options)) as provider:
                reading = LiveSignal(provider, zone).hourly(now, hours)
                note = watttime_index(provider, zone) if isinstance(provider, WattTime) else None
    except (SignalError, TraceError) as err:
        fail(str(err))
    issued = f", issued {iso(reading.issued)}" if reading.issued is not None else ""
    table = Table(title=f"{source} {zone}: gCO2eq/kWh{issued}")
    table.add_column("hour (UTC)")
    table.add_column("gCO2eq/kWh", justify="right")
    for k, value in enumerate(reading.g_per_kwh):
        table.add_row(iso(reading.start + 3600 * k)[:-4] + "Z", f"{value:,.1f}")
    console.print(table)
    if note:
        console.print(note, markup=False)
    console.print(reading.source)


def watttime_index(provider: WattTime, region: str) -> str:
    """One line on the region's current WattTime index, or on why there is none."""
    from quasched.signals import SignalError
    from quasched.signals.base import iso

    try:
        index = provider.index(region)
    except SignalError as err:
        return f"note: no WattTime index: {err}"
    return (f"WattTime index {index.percent:g} of 100 at {iso(index.time)} (the current MOER's rank among the "
            "region's recent values, not an intensity)")
