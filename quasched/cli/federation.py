"""``quasched federation``: carbon-aware dispatch over clusters in grid zones, vs baselines and the oracle."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from quasched.cli.common import DataDirOption, finite_option
from quasched.federation.registry import DEFAULT_DISPATCHERS, RECOMMENDED
from quasched.report.wording import counted

console = Console(width=None if sys.stdout.isatty() else 160)


def federation(
    trace: str = typer.Option("openb-default", help="Trace with creation/deletion times: openb-*, dlrm-2025, synthetic."),
    data_dir: Optional[Path] = DataDirOption,
    carbon_dir: Optional[Path] = typer.Option(None, help="Folder of carbon_intensity_2023_hourly.csv "
                                              "(else $QUASCHED_CARBON). Data: Electricity Maps (ODbL)."),
    zones: str = typer.Option("all", help="Comma-separated zones to draw the clusters' zones from, or 'all'."),
    clusters: int = typer.Option(4, min=1, help="Clusters in the federation (distinct zones, seeded draw)."),
    seeds: str = typer.Option("1", help="Scenario seeds: 1, 1-10 or 1,4 (window, zones, node split, PUE, slack)."),
    days: float = typer.Option(7.0, min=0.1, callback=finite_option("a number of days such as 7"),
                               help="Length of the trace window replayed, days."),
    capacity: float = typer.Option(1.5, min=0.01, callback=finite_option("a multiple such as 1.5"),
                                   help="Federation GPUs = this × the window's peak GPU demand."),
    flexible: float = typer.Option(0.5, min=0.0, max=1.0, help="Share of the jobs of <= 24 h that get slack."),
    slack: str = typer.Option("4,24", help="Slack range of flexible jobs, hours: LO,HI (uniform)."),
    dispatchers: str = typer.Option(";".join(DEFAULT_DISPATCHERS), help="Semicolon-separated, parameters after a colon, "
                                    f"e.g. 'greedy;{RECOMMENDED}:perfect=true'; `quasched policies` lists them."),
    policy: str = typer.Option("fgd", help="Scheduling policy inside every cluster."),
    oracle: bool = typer.Option(True, help="Also solve the offline oracles (HiGHS): the LP bound, its plan replayed, "
                                "and the cheapest derated plan whose replay misses at most as many deadlines as the "
                                "last dispatcher ('oracle')."),
    out: Optional[Path] = typer.Option(None, help="Write federation.csv, savings.png and allocation_seed*.png here."),
) -> None:
    """Dispatch one job stream over clusters in different grid zones (with PUE) and compare dispatchers with offline
    HiGHS oracles: kg CO2e, kWh, deadline misses, waits and allocation per cluster.

    Baselines: proportional, least-loaded, greenest, greedy. carbon-aware defers flexible jobs within their slack to
    forecast-green slots; carbon-defer (run last by default, the oracle is held to its misses) adds prices for the
    carbon a run takes from other jobs, node-level starts, re-decisions and nested bookings (docs/federation.md).
    Oracles: the LP bound and executable plans. `quasched policies` lists every dispatcher's parameters."""
    import numpy as np

    from quasched.cli.common import fail, load_inputs, output_dir, parse_policies, parse_seeds
    from quasched.federation.evaluate import evaluate
    from quasched.federation.registry import make_dispatcher
    from quasched.federation.report import federation_table, plot_allocation, plot_savings, write_rows
    from quasched.federation.scenario import draw_scenario, federation_gpus, jobs_of
    from quasched.traces.carbon import ATTRIBUTION, carbon_zones, load_carbon
    from quasched.traces.errors import TraceError

    names = [d.strip() for d in dispatchers.split(";") if d.strip()]
    try:
        for name in names or ["(none)"]:
            make_dispatcher(name)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--dispatchers") from None
    try:
        lo, hi = (float(v) for v in slack.split(","))
    except ValueError:
        raise typer.BadParameter(f"bad slack range {slack!r}: use LO,HI in hours, e.g. 4,24",
                                 param_hint="--slack") from None
    if not 0 <= lo <= hi < math.inf:
        raise typer.BadParameter(f"slack range {slack!r} needs finite 0 <= LO <= HI, e.g. 4,24", param_hint="--slack")
    listed = [z.strip() for z in zones.split(",") if z.strip()]
    if zones != "all" and (not listed or len(set(listed)) < len(listed)):
        raise typer.BadParameter(f"{zones!r} needs distinct zones, e.g. DE-LU,GB, or 'all'", param_hint="--zones")
    parse_policies(policy)  # a bad --policy fails here, before the data loads
    seed_list = parse_seeds(seeds)
    output_dir(out)
    try:
        wanted = carbon_zones(carbon_dir) if zones == "all" else listed
        series = [load_carbon(z, carbon_dir) for z in wanted]
    except (TraceError, ValueError) as err:
        fail(str(err))
    nodes, workload = load_inputs(trace, data_dir)
    span_days = float(np.ptp(jobs_of(workload)[0])) / 86400 if len(workload) else 0.0
    if span_days < days:
        console.print(f"[yellow]note:[/] {trace}'s arrivals span {span_days:.2g} days: each window holds all of them, "
                      f"not --days {days:g}")
    rows: list[dict] = []
    written: list[Path] = []
    for seed in seed_list:
        try:
            scenario = draw_scenario(nodes, workload, series, seed, clusters, capacity, days, flexible, (lo, hi))
        except ValueError as err:
            fail(str(err))
        console.print(f"seed {seed}: {counted(len(scenario.workload), 'job')}, " + ", ".join(
            f"{m.name} ({counted(m.nodes.total_gpus, 'GPU')}, PUE {m.pue:g})" for m in scenario.members))
        asked, held = federation_gpus(scenario.workload, capacity), sum(m.nodes.total_gpus for m in scenario.members)
        if held < asked:  # the trace has too few nodes: say so rather than report a smaller federation silently
            console.print(f"[yellow]note:[/] --capacity {capacity:g} asks for {asked:,.0f} GPUs; the trace's nodes "
                          f"give {held:,}")
        rows += (scenario_rows := evaluate(scenario, names, policy, seed, oracle))
        if out is not None:
            written.append(plot_allocation(out / f"allocation_seed{seed}.png", scenario_rows,
                                           title=f"seed {seed}: GPU-hours per cluster"))
    console.print(federation_table(rows, title=f"{trace}: {clusters} clusters, {days:g}-day windows, policy {policy}"))
    console.print("saving = 1 − dynamic kg CO2e (job model) / proportional split's. " + ATTRIBUTION)
    if out is not None:
        title = f"{trace}: {clusters} clusters, {days:g}-day windows"
        written += [write_rows(out / "federation.csv", rows),
                    plot_savings(out / "savings.png", rows, title=title, ours=names[-1])]
        console.print(f"wrote {counted(len(written), 'file')} to {out}")
