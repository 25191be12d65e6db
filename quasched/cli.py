"""Command line: ``quasched simulate``, ``replay``, ``batch`` and ``traces list|show``."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console

from quasched.optimize.cli import batch
from quasched.policies.registry import describe as describe_policies

# Command bodies import NumPy, pandas, matplotlib and the engines, so --help starts fast.

app = typer.Typer(
    help="Placement policies, trace-driven simulation and batch optimisation for GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
traces_app = typer.Typer(help="Inspect the workload traces quasched can load.", no_args_is_help=True)
app.add_typer(traces_app, name="traces")
app.command("batch")(batch)
console = Console(width=None if sys.stdout.isatty() else 140)

DATA_DIR_HELP = (
    "Directory holding the trace files (e.g. ../shared/traces). Default: $QUASCHED_DATA, "
    "then the user cache (~/.cache/quasched)."
)
POLICY_HELP = (
    "Policy specs, comma-separated, each NAME or NAME:PARAM=VALUE (e.g. fgd,headroom:beta=2,bestfit), "
    "or 'all' (the six paper policies). " + describe_policies()
)
RNG_HELP = ("Random stream: 'native' uses NumPy; 'go' reproduces the FGD artifact's Go simulator "
            "bit for bit (Go's math/rand, seeded from the packaged rngCooked table).")
CLUSTER_HELP = "YAML cluster file replacing the trace's nodes (docs/file-formats.md), e.g. examples/cluster.yaml."
WORKLOAD_HELP = "Workload file (.csv, .jsonl) replacing the trace's pods (docs/file-formats.md)."


class Rng(StrEnum):
    go = "go"
    native = "native"


def parse_seeds(text: str) -> list[int]:
    """``42``, ``42-51`` or ``42,45,50`` → list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            lo, hi = part.split("-", 1)
            seeds += range(int(lo), int(hi) + 1)
        elif part:
            seeds.append(int(part))
    if not seeds:
        raise typer.BadParameter(f"no seeds in {text!r}")
    return seeds


def parse_policies(text: str) -> list[str]:
    """Policy specs from ``all`` (the six paper policies) or ``fgd,headroom:beta=2,bestfit``."""
    from quasched.policies.registry import parse_specs

    try:
        return [str(spec) for spec in parse_specs(text)]
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


def fail(message: str) -> NoReturn:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


def load_inputs(trace: str, data_dir: Path | None, cluster_file: Path | None = None,
                workload_file: Path | None = None):
    """``(nodes, workload)`` of a named trace, optionally replaced by a cluster and/or workload
    file; a clean error (exit 2) when they cannot be loaded."""
    from quasched.traces import catalog
    from quasched.traces.errors import TraceError

    try:
        return catalog.load_inputs(trace, cluster_file, workload_file, data_dir)
    except TraceError as err:
        fail(str(err))


def progress_bar():
    """A transient bar with count and elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console, transient=True,
    )


@app.command()
def simulate(
    trace: str = typer.Option(
        "synthetic", help="Trace name (see `quasched traces list`); 'synthetic' needs no download."
    ),
    policy: str = typer.Option("fgd", help=POLICY_HELP),
    seeds: str = typer.Option("42", help="Seeds: 42, 42-51 or 42,45,50. One run per policy and seed."),
    tune: float = typer.Option(
        1.3, help="Tune the workload to this multiple of cluster GPU capacity (0 = keep it as is, shuffled)."
    ),
    rng: Rng = typer.Option(Rng.native, help=RNG_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
    cluster_file: Optional[Path] = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    workload_file: Optional[Path] = typer.Option(None, "--workload", help=WORKLOAD_HELP),
    compat_data: Optional[Path] = typer.Option(
        None, help="--rng go: read go_rng_cooked.txt from this directory instead of the packaged "
        "table (default: $QUASCHED_COMPAT_DATA if set)."
    ),
    out: Optional[Path] = typer.Option(
        None, help="Write curves CSVs (published layout), failed pods and PNG plots here."
    ),
    events: bool = typer.Option(False, help="Also write one per-event CSV per run into --out."),
    workers: int = typer.Option(0, help="Worker processes (0 = one per CPU core)."),
) -> None:
    """Run the FGD paper's arrival experiment: pods arrive in shuffled order, are tuned to
    --tune × GPU capacity, never depart; report GPU allocation and fragmentation per policy."""
    from quasched.compat.artifact import write_curves, write_events
    from quasched.report.files import write_failures, write_summary
    from quasched.report.plots import plot_curves
    from quasched.report.tables import failure_table, policy_table
    from quasched.sim.arrival import ExperimentConfig
    from quasched.sim.sweep import run_sweep
    from quasched.traces.catalog import inputs_label

    policies, seed_list = parse_policies(policy), parse_seeds(seeds)
    if rng is Rng.go:
        from quasched.compat.gorand import CompatDataMissing, load_cooked

        try:
            load_cooked(compat_data)
        except CompatDataMissing as err:
            fail(str(err))
    nodes, workload = load_inputs(trace, data_dir, cluster_file, workload_file)
    trace = inputs_label(trace, cluster_file, workload_file)
    config = ExperimentConfig(tune_ratio=tune, rng=rng.value, compat_data=compat_data)
    if rng is Rng.go:  # reproduction: the artifact's rounding, so curves equal the published ones
        from quasched.compat.curves import discrete_curves as curves
    else:
        from quasched.metrics.curves import arrival_curves as curves
    console.print(
        f"[bold]{trace}[/]: {len(workload):,} pods on {len(nodes):,} nodes ({nodes.total_gpus:,} GPUs); "
        f"tune {tune}, rng {rng.value}, {len(policies)} policies × {len(seed_list)} seeds"
    )
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task("simulating", total=len(policies) * len(seed_list))
        runs = run_sweep(
            nodes, workload, policies, seed_list, config, workers=workers or None,
            keep_logs=events, on_done=lambda r: bar.advance(task), curves=curves,
        )
    wall = time.perf_counter() - start
    console.print(policy_table(runs, title=f"{trace} — tune {tune}, seeds {seeds} ({wall:.1f} s wall)"))
    console.print(failure_table(runs))
    if out is not None:
        written = write_curves(out, trace, tune, nodes.total_gpus, runs)
        written += [write_failures(out, runs), write_summary(out, runs)]
        for curve in ("alloc", "frag_ratio"):
            written.append(plot_curves(out / f"{curve}.png", runs, curve, title=f"{trace}, tune {tune}"))
        if events:
            written += [write_events(out / "events", r, nodes.total_gpus) for r in runs]
        console.print(f"wrote {len(written)} files to {out}")


@app.command()
def replay(
    trace: str = typer.Option(
        "synthetic", help="Trace with creation/deletion times: synthetic (no download), dlrm-2025, openb-*."
    ),
    policy: str = typer.Option("fgd", help=POLICY_HELP),
    seeds: str = typer.Option("42", help="Seeds: 42, 42-51 or 42,45,50 (node tie-break ranks, Random)."),
    departure: str = typer.Option(
        "duration", help="'duration': a pod runs its trace lifetime from placement; "
        "'trace': it leaves at its trace deletion time (withdrawn if still queued)."
    ),
    missing_creation: str = typer.Option(
        "start", help="Rows without creation time (created before the trace window): "
        "'start' = arrive at trace start, 'skip' = ignore them."
    ),
    headroom: float = typer.Option(
        1.0, help="DLRM only: cluster size = peak concurrent demand × headroom (256 cores, 8 GPUs, 1 TiB nodes)."
    ),
    rng: Rng = typer.Option(Rng.native, help=RNG_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
    cluster_file: Optional[Path] = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    workload_file: Optional[Path] = typer.Option(None, "--workload", help=WORKLOAD_HELP),
    out: Optional[Path] = typer.Option(None, help="Write per-event CSVs, per-pod waits and a summary CSV here."),
) -> None:
    """Time-based replay: pods arrive at their creation time, wait in a FIFO queue when nothing
    fits, run and depart; report waiting, queue length, allocation and fragmentation over time."""
    from quasched.report.replay import replay_table, write_replay
    from quasched.sim.replay import run_replay
    from quasched.traces.catalog import inputs_label, trace_info
    from quasched.traces.dlrm import dlrm_cluster

    policies, seed_list = parse_policies(policy), parse_seeds(seeds)
    nodes, workload = load_inputs(trace, data_dir, cluster_file, workload_file)
    if cluster_file is None and trace_info(trace).kind == "dlrm":
        nodes = dlrm_cluster(workload, headroom=headroom)
    trace = inputs_label(trace, cluster_file, workload_file)
    console.print(f"[bold]{trace}[/]: {len(workload):,} pods on {len(nodes):,} nodes ({nodes.total_gpus:,} GPUs)")
    results = []
    with progress_bar() as bar:
        for name in policies:
            for seed in seed_list:
                task = bar.add_task(f"{name} seed {seed}", total=len(workload))
                try:
                    results.append(run_replay(
                        nodes, workload, name, seed, departure=departure, missing_creation=missing_creation,
                        rng=rng.value,
                        progress=lambda done, total: bar.update(task, completed=done, total=total),
                    ))
                except ValueError as err:
                    fail(str(err))
    console.print(replay_table(results, title=f"{trace} time-based replay"))
    if out is not None:
        written = write_replay(out, results)
        console.print(f"wrote {len(written)} files to {out}")


@traces_app.command("list")
def traces_list() -> None:
    """List the trace names quasched knows."""
    from quasched.traces import catalog

    for name in catalog.list_traces():
        console.print(name)


@traces_app.command("show")
def traces_show(
    name: str = typer.Argument(..., help="Trace name, e.g. openb-default or dlrm-2025."),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Shape summary of a trace: pod classes, GPU request, distinct shapes."""
    from rich.table import Table

    from quasched.traces.catalog import describe

    nodes, workload = load_inputs(name, data_dir)
    table = Table(title=name, show_header=False)
    for key, value in describe(workload, nodes).items():
        table.add_row(str(key), f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)


if __name__ == "__main__":
    app()
