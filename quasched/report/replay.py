"""Tables, CSV files and plots of time-based replays."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from rich.table import Table

from quasched.policies.registry import display_label
from quasched.report.plots import save_figure
from quasched.report.wording import counted
from quasched.sim.records import KILL
from quasched.sim.replay_result import STATUS_NAMES, ReplayResult

_COLUMNS = (
    ("placed", "placed", "{:,}"),
    ("never placed", "never_placed", "{:,}"),
    ("wait mean s", "wait_mean_s", "{:,.0f}"),
    ("wait p95 s", "wait_p95_s", "{:,.0f}"),
    ("GPU alloc avg %", "gpu_alloc_avg_pct", "{:.2f}"),
    ("GPU alloc peak %", "peak_gpu_alloc_pct", "{:.2f}"),
    ("frag avg %", "frag_ratio_avg_pct", "{:.2f}"),
    ("peak queue", "peak_queue", "{:,}"),
    ("power avg kW", "power_avg_kw", "{:,.1f}"),
    ("energy kWh", "energy_kwh", "{:,.0f}"),
    ("time s", "elapsed_s", "{:.1f}"),
)
#: shown when the runs have carbon figures
_CARBON = ("kg CO2e", "carbon_kg", "{:,.0f}")
#: shown when the runs model GPU failures
_FAILURES = (("GPU failures", "device_failures", "{:,}"), ("interrupted", "interruptions", "{:,}"),
             ("migrated", "migrations", "{:,}"),
             ("lost GPU-h", "lost_gpu_h", "{:,.1f}"), ("goodput %", "goodput_pct", "{:.3f}"))


def replay_table(results: Sequence[ReplayResult], title: str = "") -> Table:
    """One row per (policy, seed): placements, waiting, allocation, fragmentation, queue."""
    table = Table(title=title)
    table.add_column("policy", style="bold")
    table.add_column("seed", justify="right")
    columns = (_COLUMNS + ((_CARBON,) if any(r.carbon is not None for r in results) else ())
               + (_FAILURES if any(r.ledger is not None for r in results) else ()))
    for header, _, _ in columns:
        table.add_column(header, justify="right")
    for result in results:
        s = result.summary()
        cells = ["-" if k not in s or isinstance(s[k], float) and np.isnan(s[k]) else fmt.format(s[k])
                 for _, k, fmt in columns]
        table.add_row(display_label(str(s["policy"])), str(s["seed"]), *cells)
    return table


def summary_rows(result: ReplayResult) -> list[tuple[str, str]]:
    """``(label, value)`` pairs of a replay's summary for a two-column table."""
    s = result.summary()
    pct = lambda v: f"{v:.2f} %"  # noqa: E731
    secs = lambda v: "-" if v != v else f"{v:,.1f} s"  # noqa: E731
    return [
        ("policy / seed", f"{display_label(str(s['policy']))} / {s['seed']}"),
        ("departures", str(s["departure"])),
        ("cluster", f"{counted(int(s['nodes']), 'node')}, {counted(int(s['gpus']), 'GPU')}"),
        ("pods (rows)", f"{s['pods']:,}"),
        ("skipped (no creation time)", f"{s['skipped']:,}"),
        ("arrived", f"{s['arrived']:,}"),
        ("placed", f"{s['placed']:,} ({s['placed_on_arrival']:,} on arrival)"),
        ("queued on arrival", f"{s['queued']:,}"),
        ("never placed", f"{s['never_placed']:,} ({s['withdrawn']:,} withdrawn, "
                         f"{s['still_queued']:,} still queued)"),
        ("wait mean / p50 / p95 / max",
         " / ".join(secs(s[k]) for k in ("wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_max_s"))),
        ("GPU allocation (time avg / peak)",
         f"{pct(s['gpu_alloc_avg_pct'])} / {pct(s['peak_gpu_alloc_pct'])}"),
        ("CPU allocation (time avg)", pct(s["cpu_alloc_avg_pct"])),
        ("GPU frag ratio (time avg)", pct(s["frag_ratio_avg_pct"])),
        ("peak queue", f"{s['peak_queue']:,}"),
        ("modelled power avg (step / linear)", f"{s['power_avg_kw']:,.1f} / {s['power_linear_avg_kw']:,.1f} kW"),
        ("energy (step / linear)", f"{s['energy_kwh']:,.1f} / {s['energy_linear_kwh']:,.1f} kWh"),
        *([("carbon (step / linear)", f"{s['carbon_kg']:,.1f} / {s['carbon_linear_kg']:,.1f} kg CO2e "
            f"(zone {s['carbon_zone']}, Electricity Maps, ODbL)")] if "carbon_kg" in s else []),
        *([("GPU failures (recovered)", f"{s['device_failures']:,} ({s['device_recoveries']:,})"),
           ("interruptions (pods)", f"{s['interruptions']:,} ({s['pods_interrupted']:,})"),
           ("GPU warnings / nodes drained / pods migrated", f"{s['warnings']:,} / {s['drains']:,} / "
                                                          f"{s['migrations']:,}"),
           ("lost / allocated GPU-hours", f"{s['lost_gpu_h']:,.2f} / {s['alloc_gpu_h']:,.1f} "
                                          f"(goodput {s['goodput_pct']:.3f} %)"),
           ("requeue wait mean / max", f"{secs(s['requeue_wait_mean_s'])} / {secs(s['requeue_wait_max_s'])}")]
          if "lost_gpu_h" in s else []),
        ("events", f"{s['events']:,}"),
        ("elapsed", f"{s['elapsed_s']:.2f} s"),
    ]


def _stem(result: ReplayResult) -> str:
    return f"{display_label(result.config.policy)}_{result.config.seed}"


def write_replay(out: Path, results: Sequence[ReplayResult]) -> list[Path]:
    """``summary.csv``, per run ``events_<Policy>_<seed>.csv`` and ``pods_<Policy>_<seed>.csv``,
    and plots of GPU allocation and queue length over time (``replay.png``); with failures,
    pods get their interruptions and ``failures.png`` the cumulative lost GPU-hours."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "summary.csv"]
    pd.DataFrame([r.summary() for r in results]).to_csv(paths[0], index=False)
    for r in results:
        names = np.asarray(r.workload.name, dtype=object)
        events = out / f"events_{_stem(r)}.csv"
        pd.DataFrame(r.events.columns(names)).to_csv(events, index=False)
        pods = out / f"pods_{_stem(r)}.csv"
        pd.DataFrame({
            "pod": names, "status": np.asarray(STATUS_NAMES, dtype=object)[r.pods.status],
            "arrival": r.pods.arrival, "placed": r.pods.placed, "departed": r.pods.departed,
            "node": r.pods.node, "wait_s": r.pods.wait,
            **({"interruptions": r.ledger.interruptions, "migrations": r.ledger.migrations}
               if r.ledger is not None else {}),
        }).to_csv(pods, index=False)
        paths += [events, pods]
    paths.append(plot_timeline(out / "replay.png", results))
    if any(r.ledger is not None for r in results):
        paths.append(plot_losses(out / "failures.png", results))
    return paths


Series = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _two_panels(path: Path, results: Sequence[ReplayResult], series: Callable[[ReplayResult], Series | None],
                ylabels: tuple[str, str]) -> Path:
    """Two step plots over trace time (hours), one line per run that has ``series``."""
    fig = Figure(figsize=(8, 6), dpi=120)
    axes = fig.subplots(2, 1, sharex=True)
    for r in results:
        lines = series(r)
        if lines is None:
            continue
        label = f"{display_label(r.config.policy)} seed {r.config.seed}"
        for ax, (x, y) in zip(axes, lines):
            ax.step(x, y, where="post", lw=1, label=label)
    for ax, ylabel in zip(axes, ylabels):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[1].set_xlabel("trace time (hours)")
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)


def plot_timeline(path: Path, results: Sequence[ReplayResult]) -> Path:
    """GPU allocation and queue length over trace time, one line per run."""
    def series(r: ReplayResult) -> Series:
        hours = (r.events.time - r.events.time[0]) / 3600 if len(r.events) else r.events.time
        return (hours, r.events.gpu_alloc_pct), (hours, r.events.queue_len)

    return _two_panels(path, results, series, ("GPU allocation (%)", "queued pods"))


def plot_losses(path: Path, results: Sequence[ReplayResult]) -> Path:
    """Cumulative lost GPU-hours and interruptions over trace time, one line per run with failures."""
    def series(r: ReplayResult) -> Series | None:
        if r.ledger is None or not len(r.events):
            return None
        t0 = r.events.time[0]
        lost = np.array(r.ledger.losses).reshape(-1, 2)
        kills = r.events.time[r.events.kind == KILL]
        return ((np.r_[0, (lost[:, 0] - t0) / 3600], np.r_[0, np.cumsum(lost[:, 1]) / 3600]),
                (np.r_[0, (kills - t0) / 3600], np.arange(len(kills) + 1)))

    return _two_panels(path, results, series, ("lost GPU-hours (cumulative)", "interruptions (cumulative)"))
