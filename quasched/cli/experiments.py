"""The arrival experiment's commands: ``simulate`` (one trace, policies × seeds), ``sweep`` (a
resumable traces × policies × seeds matrix in a results store) and ``traces list|show``."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal, Optional

import typer

from quasched.cli.common import (
    POLICY_HELP, RNG_HELP, ClusterOption, DataDirOption, Rng, RngOption, WorkloadOption, console, curve_function, fail,
    finite, load_inputs, output_dir, parse_policies, parse_seeds, progress_bar,
)
from quasched.report.wording import counted

BackendName = Literal["local", "ray"]


def simulate(
    trace: str = typer.Option(
        "synthetic", help="Trace name (see `quasched traces list`); 'synthetic' needs no download."
    ),
    policy: str = typer.Option("fgd", help=POLICY_HELP),
    seeds: str = typer.Option("42", help="Seeds: 42, 42-51 or 42,45,50. One run per policy and seed."),
    tune: float = typer.Option(
        1.3, min=0, callback=finite,
        help="Tune the workload to this multiple of cluster GPU capacity (0 = keep it as is, shuffled)."
    ),
    rng: Rng = RngOption,
    data_dir: Optional[Path] = DataDirOption,
    cluster_file: Optional[Path] = ClusterOption,
    workload_file: Optional[Path] = WorkloadOption,
    compat_data: Optional[Path] = typer.Option(
        None, help="--rng go: read go_rng_cooked.txt from this directory instead of the packaged "
        "table (default: $QUASCHED_COMPAT_DATA if set)."
    ),
    out: Optional[Path] = typer.Option(
        None, help="Write curves CSVs (published layout), failed pods and PNG plots here."
    ),
    events: bool = typer.Option(False, help="Also write one per-event CSV per run into --out."),
    workers: int = typer.Option(0, min=0, help="Worker processes (0 = one per CPU core)."),
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

    policies, seed_list = parse_policies(policy), parse_seeds(seeds, rng)
    if events and out is None:
        raise typer.BadParameter("the per-event CSVs go into --out: pass --out DIR too", param_hint="--events")
    output_dir(out)
    if rng == "go":
        from quasched.model.gorand import CompatDataMissing, load_cooked

        try:
            load_cooked(compat_data)
        except CompatDataMissing as err:
            fail(str(err))
    nodes, workload = load_inputs(trace, data_dir, cluster_file, workload_file)
    trace = inputs_label(trace, cluster_file, workload_file)
    config = ExperimentConfig(tune_ratio=tune, rng=rng, compat_data=compat_data)
    curves = curve_function(rng)
    console.print(
        f"[bold]{trace}[/]: {counted(len(workload), 'pod')} on {counted(len(nodes), 'node')} "
        f"({counted(nodes.total_gpus, 'GPU')}); tune {tune}, rng {rng}, {counted(len(policies), 'policy', 'policies')} "
        f"× {counted(len(seed_list), 'seed')}"
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
        console.print(f"wrote {counted(len(written), 'file')} to {out}")


def sweep(
    traces: str = typer.Option(
        "paper", help="Comma-separated trace names, or 'paper': the 17 openb pod lists of the FGD paper."
    ),
    policy: str = typer.Option("all", help=POLICY_HELP),
    seeds: str = typer.Option("42-51", help="Seeds: 42, 42-51 or 42,45,50."),
    tune: float = typer.Option(1.3, min=0, callback=finite,
                               help="Tune each workload to this multiple of cluster GPU capacity."),
    rng: Rng = typer.Option("go", help=RNG_HELP),
    data_dir: Optional[Path] = DataDirOption,
    store: Path = typer.Option(
        Path("results/sweep.sqlite"), help="SQLite results store: finished runs are kept here and skipped "
        "when the sweep is run again (same trace data, policy, seed, settings and simulator code)."
    ),
    backend: BackendName = typer.Option(
        "local", help="'local': a process pool on this machine; 'ray': Ray tasks "
        "(pip install 'quasched\\[ray]'; every Ray node needs --data-dir)."
    ),
    workers: int = typer.Option(0, min=0, help="Worker processes, or CPUs for a local Ray (0 = one per CPU core)."),
    ray_address: Optional[str] = typer.Option(None, help="Address of a running Ray cluster (default: start one)."),
    out: Optional[Path] = typer.Option(
        None, help="Write matrix.csv, a heat map per metric and each trace's curves (published layout) here."
    ),
) -> None:
    """Run a resumable traces × policies × seeds matrix of the arrival experiment (default: the FGD
    paper's published 17 traces × 6 policies × 10 seeds) with a progress bar; results land in --store."""
    from quasched.compat.artifact import write_curves
    from quasched.report.matrix import METRICS, matrix_table, plot_matrix, write_matrix_csv
    from quasched.sim.arrival import ExperimentConfig
    from quasched.sim.backends import make_backend
    from quasched.sim.matrix import matrix_tasks, run_matrix
    from quasched.sim.store import ResultStore
    from quasched.traces.catalog import PAPER_VARIANTS, trace_info
    from quasched.traces.errors import TraceError

    names = [f"openb-{v}" for v in PAPER_VARIANTS] if traces == "paper" else [
        t.strip() for t in traces.split(",") if t.strip()]
    if not names:  # was a sweep of 0 runs, exit 0
        raise typer.BadParameter(f"no traces in {traces!r}: write openb-default,openb-gpushare40 or 'paper'",
                                 param_hint="--traces")
    try:
        for name in names:
            trace_info(name)
    except TraceError as err:
        fail(str(err))
    policies, seed_list = parse_policies(policy), parse_seeds(seeds, rng)
    try:
        runner = make_backend(backend, workers or None, ray_address)
    except RuntimeError as err:
        fail(str(err))
    output_dir(out)
    try:
        results = ResultStore(store)
    except (OSError, sqlite3.Error) as err:
        fail(f"--store {store}: cannot open it as a results store ({err}); "
             "pass a new file or one an earlier sweep wrote, in a writable folder")
    curves = curve_function(rng)
    tasks = matrix_tasks(names, policies, seed_list, ExperimentConfig(tune_ratio=tune, rng=rng), curves,
                         data_dir)
    console.print(f"{counted(len(names), 'trace')} × {counted(len(policies), 'policy', 'policies')} × "
                  f"{counted(len(seed_list), 'seed')} = {counted(len(tasks), 'run')}; "
                  f"store {store}, backend {backend}")
    start = time.perf_counter()
    with results, progress_bar() as bar:
        task = bar.add_task("runs", total=len(tasks))
        try:
            result = run_matrix(tasks, results, runner, on_done=lambda *_: bar.advance(task))
        except TraceError as err:
            fail(str(err))
    wall = time.perf_counter() - start
    console.print(matrix_table(result, title=f"GPU allocation at 130 % arrived (%), mean ± std over seeds; "
                               f"{counted(len(tasks) - result.skipped, 'run')} in {wall:.1f} s, "
                               f"{result.skipped} from the store"))
    if out is not None:
        written = [write_matrix_csv(out / "matrix.csv", result)]
        written += [plot_matrix(out / f"{name.replace('@', '_')}.png", result, name) for name, _, _ in METRICS]
        for name in names:
            runs = [r for t, r in zip(result.tasks, result.runs) if t.trace == name]
            written += write_curves(out / name, name, tune, result.total_gpus[name], runs)
        console.print(f"wrote {counted(len(written), 'file')} to {out}")


def traces_list() -> None:
    """List the trace names quasched knows."""
    from quasched.traces import catalog

    for name in catalog.list_traces():
        console.print(name)


def traces_show(
    name: str = typer.Argument(..., help="Trace name, e.g. openb-default or dlrm-2025."),
    data_dir: Optional[Path] = DataDirOption,
) -> None:
    """Shape summary of a trace: pod classes, GPU request, distinct shapes."""
    from rich.table import Table

    from quasched.traces.catalog import describe

    nodes, workload = load_inputs(name, data_dir)
    table = Table(title=name, show_header=False)
    for key, value in describe(workload, nodes).items():
        table.add_row(str(key), f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)
