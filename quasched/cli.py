"""Command line: ``quasched simulate``, ``sweep``, ``replay``, ``batch``, ``traces list|show``; the service
``quasched serve`` and its clients ``submit``, ``jobs``, ``queues``, ``queue``, ``nodes``, ``cancel``, ``token``."""

from __future__ import annotations

import math
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape

from quasched.federation.cli import federation
from quasched.optimize.cli import batch
from quasched.policies.registry import describe as describe_policies

if TYPE_CHECKING:
    from rich.progress import Progress

    from quasched.model.cluster import NodeSpec
    from quasched.model.workload import Workload
    from quasched.sim.sweep import CurveFunction

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
app.command("federation")(federation)
console = Console(width=None if sys.stdout.isatty() else 140)

DATA_DIR_HELP = (
    "Directory holding the trace files (e.g. ../shared/traces). Default: $QUASCHED_DATA, "
    "then the user cache (~/.cache/quasched)."
)
POLICY_HELP = (
    "Policy specs, comma-separated, each NAME or NAME:PARAM=VALUE (e.g. fgd,headroom:beta=2,bestfit), "
    "or 'all' (the six paper policies). " + escape(describe_policies())
)
RNG_HELP = ("Random stream: 'native' uses NumPy; 'go' reproduces the FGD artifact's Go simulator "
            "bit for bit (Go's math/rand, seeded from the packaged rngCooked table).")
CLUSTER_HELP = "YAML cluster file replacing the trace's nodes (docs/file-formats.md), e.g. examples/cluster.yaml."
WORKLOAD_HELP = "Workload file (.csv, .jsonl) replacing the trace's pods (docs/file-formats.md)."


# Choices of options (typer shows them as <a|b> and rejects anything else).
Rng = Literal["go", "native"]
Migrate = Literal["off", "device", "node"]
MigrateRule = Literal["always", "pays", "pays_lindy"]
MigrateAt = Literal["now", "checkpoint"]
LiftRun = Literal["mean", "known"]
Departure = Literal["duration", "trace"]
MissingCreation = Literal["start", "skip"]
BackendName = Literal["local", "ray"]
Clock = Literal["wall", "virtual"]
Order = Literal["fair", "fifo"]
BatchSolver = Literal["milp", "qubo-sa", "qaoa", "greedy"]


def finite(value: float) -> float:
    """Callback of a multiple (``--tune``, ``--headroom``): infinity would size the workload or cluster forever."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number; write a multiple such as 1.3")
    return value


def parse_seeds(text: str) -> list[int]:
    """``42``, ``42-51`` or ``42,45,50`` → list of seeds; a clear ``--seeds`` error otherwise."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part[1:].partition("-")
        try:
            first, last = (int(part[0] + lo), int(hi)) if dash else (int(part), int(part))
        except ValueError:
            if not part:
                continue
            raise typer.BadParameter(f"{part!r} is not a seed: write 42, 42-51 or 42,45,50",
                                     param_hint="--seeds") from None
        if first > last:
            raise typer.BadParameter(f"empty range {part!r}: write the low seed first ({last}-{first})",
                                     param_hint="--seeds")
        seeds += range(first, last + 1)
    if not seeds:
        raise typer.BadParameter(f"no seeds in {text!r}: write 42, 42-51 or 42,45,50", param_hint="--seeds")
    return seeds


def parse_policies(text: str) -> list[str]:
    """Policy specs from ``all`` (the six paper policies) or ``fgd,headroom:beta=2,bestfit``."""
    from quasched.policies.registry import parse_specs

    try:
        return [str(spec) for spec in parse_specs(text)]
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--policy") from None


def fail(message: str) -> NoReturn:
    """Print ``error: message`` and exit with code 2 (no traceback)."""
    console.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(2)


def output_dir(out: Path | None) -> None:
    """Create ``--out`` before any run, so that a folder that cannot be written fails at once, not at the end."""
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            fail(f"--out {out}: cannot create the folder ({err.strerror}); pass a writable folder")


def load_inputs(trace: str, data_dir: Path | None, cluster_file: Path | None = None,
                workload_file: Path | None = None) -> tuple[NodeSpec, Workload]:
    """``(nodes, workload)`` of a named trace, optionally replaced by a cluster and/or workload
    file; a clean error (exit 2) when they cannot be loaded."""
    from quasched.traces import catalog
    from quasched.traces.errors import TraceError

    try:
        return catalog.load_inputs(trace, cluster_file, workload_file, data_dir)
    except TraceError as err:
        fail(str(err))


def curve_function(rng: Rng) -> CurveFunction:
    """How runs are binned into curves: with ``--rng go`` the artifact's rounding (a reproduction,
    so curves equal the published ones), else exact bin means."""
    if rng == "go":
        from quasched.compat.curves import discrete_curves

        return discrete_curves
    from quasched.metrics.curves import arrival_curves

    return arrival_curves


def progress_bar() -> Progress:
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
        1.3, min=0, callback=finite,
        help="Tune the workload to this multiple of cluster GPU capacity (0 = keep it as is, shuffled)."
    ),
    rng: Rng = typer.Option("native", help=RNG_HELP),
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

    policies, seed_list = parse_policies(policy), parse_seeds(seeds)
    if events and out is None:
        raise typer.BadParameter("the per-event CSVs go into --out: pass --out DIR too", param_hint="--events")
    output_dir(out)
    if rng == "go":
        from quasched.compat.gorand import CompatDataMissing, load_cooked

        try:
            load_cooked(compat_data)
        except CompatDataMissing as err:
            fail(str(err))
    nodes, workload = load_inputs(trace, data_dir, cluster_file, workload_file)
    trace = inputs_label(trace, cluster_file, workload_file)
    config = ExperimentConfig(tune_ratio=tune, rng=rng, compat_data=compat_data)
    curves = curve_function(rng)
    console.print(
        f"[bold]{trace}[/]: {len(workload):,} pods on {len(nodes):,} nodes ({nodes.total_gpus:,} GPUs); "
        f"tune {tune}, rng {rng}, {len(policies)} policies × {len(seed_list)} seeds"
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


def failure_option_error(message: str) -> str:
    """A failure model's error (``failure option checkpoint_min=0 ...``) in terms of the replay's options."""
    def option(match: re.Match[str]) -> str:
        name = {"rate": "failure_rate", "seed": "failure_seed"}.get(match[1], match[1])
        return "--" + name.replace("_", "-") + " "

    return re.sub(r"failure option (\w+)=", option, message)


def given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given on the command line (not its default or an environment variable)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _failures(default: float | str | bool, help: str):
    """An option of the replay's failure model (shown in its own help panel)."""
    return typer.Option(default, help=help, rich_help_panel="Failures")


@app.command()
def sweep(
    traces: str = typer.Option(
        "paper", help="Comma-separated trace names, or 'paper': the 17 openb pod lists of the FGD paper."
    ),
    policy: str = typer.Option("all", help=POLICY_HELP),
    seeds: str = typer.Option("42-51", help="Seeds: 42, 42-51 or 42,45,50."),
    tune: float = typer.Option(1.3, min=0, callback=finite,
                               help="Tune each workload to this multiple of cluster GPU capacity."),
    rng: Rng = typer.Option("go", help=RNG_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
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
    try:
        for name in names:
            trace_info(name)
    except TraceError as err:
        fail(str(err))
    policies, seed_list = parse_policies(policy), parse_seeds(seeds)
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
    console.print(f"{len(names)} traces × {len(policies)} policies × {len(seed_list)} seeds = {len(tasks)} runs; "
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
                               f"{len(tasks) - result.skipped} runs in {wall:.1f} s, {result.skipped} from the store"))
    if out is not None:
        written = [write_matrix_csv(out / "matrix.csv", result)]
        written += [plot_matrix(out / f"{name.replace('@', '_')}.png", result, name) for name, _, _ in METRICS]
        for name in names:
            runs = [r for t, r in zip(result.tasks, result.runs) if t.trace == name]
            written += write_curves(out / name, name, tune, result.total_gpus[name], runs)
        console.print(f"wrote {len(written)} files to {out}")


@app.command()
def replay(
    ctx: typer.Context,
    trace: str = typer.Option(
        "synthetic", help="Trace with creation/deletion times: synthetic (no download), dlrm-2025, openb-*."
    ),
    policy: str = typer.Option("fgd", help=POLICY_HELP),
    seeds: str = typer.Option("42", help="Seeds: 42, 42-51 or 42,45,50 (node tie-break ranks, Random)."),
    departure: Departure = typer.Option(
        "duration", help="'duration': a pod runs its trace lifetime from placement; "
        "'trace': it leaves at its trace deletion time (withdrawn if still queued)."
    ),
    missing_creation: MissingCreation = typer.Option(
        "start", help="Rows without creation time (created before the trace window): "
        "'start' = arrive at trace start, 'skip' = ignore them."
    ),
    headroom: float = typer.Option(
        1.0, min=0.01, callback=finite,
        help="DLRM only: cluster size = peak concurrent demand × headroom (256 cores, 8 GPUs, 1 TiB nodes)."
    ),
    rng: Rng = typer.Option("native", help=RNG_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
    cluster_file: Optional[Path] = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    workload_file: Optional[Path] = typer.Option(None, "--workload", help=WORKLOAD_HELP),
    out: Optional[Path] = typer.Option(None, help="Write per-event CSVs, per-pod waits and a summary CSV here."),
    carbon_zone: Optional[str] = typer.Option(
        None, help="Grid zone of the hourly carbon intensity (e.g. DE-LU, US-CAL-CISO): adds kg CO2e to the "
        "summary. Data: Electricity Maps (ODbL)."),
    carbon_dir: Optional[Path] = typer.Option(
        None, help="Folder of carbon_intensity_2023_hourly.csv (else $QUASCHED_CARBON)."),
    carbon_start: str = typer.Option("2023-01-01T00:00", help="UTC time of the trace's first event on the "
                                     "intensity series (the series wraps around its year)."),
    pue: float = typer.Option(1.0, min=1.0, help="Power usage effectiveness (facility / IT energy) for energy and carbon."),
    failure_rate: float = _failures(0.0, "GPU failures per GPU-hour (0 = none; 2e-5 = Llama 3's unexpected "
                                    "interruptions on H100s). Killed pods restart from their last checkpoint; adds "
                                    "lost GPU-hours and goodput."),
    failure_seed: int = _failures(0, "Seed of the failure process (the same failures for every policy)."),
    checkpoint_min: float = _failures(30.0, "Minutes of progress between a pod's checkpoints."),
    restart_min: float = _failures(0.0, "Minutes a restarted pod spends reloading (counted as lost)."),
    transient_share: float = _failures(0.5, "Share of failures cleared by a GPU reset (--reset-min); the others "
                                       "need a repair (--repair-h)."),
    reset_min: float = _failures(10.0, "Minutes a transiently failed GPU is down."),
    repair_h: float = _failures(24.0, "Mean hours to repair a fatally failed GPU (exponential)."),
    flaky_share: float = _failures(0.05, "Share of nodes that fail more often (drawn per failure seed)."),
    flaky_factor: float = _failures(20.0, "How many times more often flaky nodes fail (the mean rate stays "
                                    "--failure-rate)."),
    precursor_share: float = _failures(0.0, "Share of fatal failures preceded by a non-fatal warning on the same "
                                       "GPU (e.g. a pending row remap; an assumption, 0 = none)."),
    precursor_lead_h: float = _failures(24.0, "Mean hours from a warning to its fatal failure (exponential)."),
    false_warnings: float = _failures(1.0, "Warnings followed by nothing, per true warning."),
    drain_errors: int = _failures(0, "Drain (cordon) a node after this many GPU errors or warnings within "
                                  "--drain-window-h (0 = never): no new pods, running ones finish."),
    drain_window_h: float = _failures(168.0, "Hours over which a node's errors count towards a drain."),
    drain_h: float = _failures(72.0, "Hours a drained node stays cordoned (inf: for good)."),
    drain_flaky: float = _failures(0.0, "Also drain a node while the posterior probability that it is one of the "
                                   "flaky nodes (Bayes on its errors and clean time, from --flaky-share, "
                                   "--flaky-factor and the mean error rate) is at least this (0 = never)."),
    drain_lift: float = _failures(0.0, "A drained node takes pods while the longest-waiting pod has waited more "
                                  "than this many times the extra GPU time per GPU a pod expects to lose there "
                                  "(its posterior of being flaky × the excess failure rate × run time × (half a "
                                  "checkpoint interval + reload)); 0 = never."),
    drain_lift_run: LiftRun = _failures("mean", "The run time --drain-lift prices: the workload's mean GPU "
                                        "pod ('mean', no durations) or the waiting pod's work left ('known')."),
    migrate: Migrate = _failures("off", "Proactive checkpoint-and-migrate right after a GPU error or warning: "
                                 "off, device (pods on that GPU) or node (pods on that node)."),
    evict: bool = _failures(False, "A drain also checkpoints and migrates the node's running pods."),
    checkpoint_cost_min: float = _failures(1.0, "Minutes an on-demand checkpoint holds a migrated pod's GPUs "
                                           "(counted as lost, with --restart-min)."),
    migrate_rule: MigrateRule = _failures("always", "With --migrate device: move a warned GPU's pods "
                                          "always, or only when the expected loss of staying (the warning's odds "
                                          "of a fatal failure before the pod ends × half a checkpoint interval + "
                                          "reload) exceeds the move's cost: 'pays' knows the pod's remaining run "
                                          "time, 'pays_lindy' estimates it by the time it has run."),
    migrate_at: MigrateAt = _failures("now", "With a 'pays' rule: 'checkpoint' lets a move wait for the "
                                      "pod's next periodic checkpoint (no on-demand checkpoint) when that is "
                                      "expected to cost less."),
) -> None:
    """Time-based replay: pods arrive at their creation time, wait in a FIFO queue when nothing
    fits, run and depart; report waiting, queue length, allocation, fragmentation and modelled
    power, energy, (with --carbon-zone) carbon and (with --failure-rate) GPU failures, lost
    GPU-hours and goodput over time. Health-aware placement: --policy healthfgd; node drains and
    proactive checkpoint-and-migrate: --drain-errors, --migrate."""
    from quasched.report.replay import replay_table, write_replay
    from quasched.sim.replay import run_replay
    from quasched.traces.catalog import inputs_label, trace_info
    from quasched.traces.dlrm import dlrm_cluster

    policies, seed_list = parse_policies(policy), parse_seeds(seeds)
    output_dir(out)
    failures = None
    if failure_rate == 0 and not given(ctx, "failure_rate"):
        idle = [p.opts[0] for p in ctx.command.params
                if getattr(p, "rich_help_panel", None) == "Failures" and given(ctx, p.name or "")]
        if idle:
            fail(f"{', '.join(idle)} act on GPU failures, which are off: pass --failure-rate too (e.g. 2e-5)")
    if failure_rate != 0:
        from quasched.sim.failures import FailureConfig

        try:
            failures = FailureConfig(
                rate=failure_rate, seed=failure_seed, checkpoint_min=checkpoint_min, restart_min=restart_min,
                transient_share=transient_share, reset_min=reset_min, repair_h=repair_h, flaky_share=flaky_share,
                flaky_factor=flaky_factor, precursor_share=precursor_share, precursor_lead_h=precursor_lead_h,
                false_warnings=false_warnings, drain_errors=drain_errors, drain_window_h=drain_window_h,
                drain_h=drain_h, drain_flaky=drain_flaky, drain_lift=drain_lift,
                drain_lift_run=drain_lift_run, migrate=migrate,
                evict=evict, checkpoint_cost_min=checkpoint_cost_min,
                migrate_rule=migrate_rule, migrate_at=migrate_at)
        except ValueError as err:
            fail(failure_option_error(str(err)))
    carbon = None
    if carbon_zone is not None:
        import numpy as np

        from quasched.traces.carbon import load_carbon

        try:
            start_at = np.datetime64(carbon_start, "s")
        except ValueError:
            fail(f"--carbon-start {carbon_start!r} is not a UTC time; write e.g. 2023-06-01T00:00")
        try:
            carbon = load_carbon(carbon_zone, carbon_dir)
        except ValueError as err:
            fail(str(err))
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
                        rng=rng, carbon=carbon, carbon_start=start_at if carbon is not None else None, pue=pue,
                        failures=failures,
                        progress=lambda done, total: bar.update(task, completed=done, total=total),
                    ))
                except ValueError as err:
                    fail(str(err))
    console.print(replay_table(results, title=f"{trace} time-based replay"))
    if carbon is not None:
        from quasched.traces.carbon import ATTRIBUTION

        console.print(f"carbon: zone {carbon.zone}, first event at {carbon_start} UTC. {ATTRIBUTION}")
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


# ---------------------------------------------------------------- the service and its clients
SERVER_HELP = "The quasched server (default: $QUASCHED_SERVER, else http://127.0.0.1:8080)."
TOKEN_HELP = "API token (default: $QUASCHED_TOKEN, else the file ./quasched.token written by `quasched serve`)."
TOKEN_FILE = Path("quasched.token")
ServerOption = typer.Option("http://127.0.0.1:8080", "--server", envvar="QUASCHED_SERVER", help=SERVER_HELP)
TokenOption = typer.Option(None, "--token", envvar="QUASCHED_TOKEN", help=TOKEN_HELP, show_default=False)


def serve_virtual(trace: str, policy: str, seed: int, rng: Rng, data_dir: Path | None, cluster_file: Path | None) -> None:
    """``serve --clock virtual``: the service's loop driven by a trace, compared with the replay."""
    import numpy as np

    from quasched.service.virtual import run_virtual
    from quasched.sim.replay import run_replay

    nodes, workload = load_inputs(trace, data_dir, cluster_file)
    [spec] = parse_policies(policy)[:1]
    start = time.perf_counter()
    try:
        served = run_virtual(nodes, workload, spec, seed, rng=rng)
    except ValueError as err:
        fail(str(err))
    elapsed = time.perf_counter() - start
    replayed = run_replay(nodes, workload, spec, seed, rng=rng)
    names = np.array([nodes.name[n] if n >= 0 else "" for n in replayed.pods.node], dtype=object)
    same = bool((names == served.node).all()) and np.array_equal(
        np.nan_to_num(replayed.pods.placed, nan=-1), np.nan_to_num(served.started, nan=-1))
    started = int(np.isfinite(served.started).sum())
    console.print(f"[bold]{trace}[/] through the service loop ({spec}, seed {seed}, virtual clock): "
                  f"{started:,} of {len(workload):,} jobs started, {served.events:,} events, {elapsed:.1f} s")
    console.print("placements identical to `quasched replay` (node and start time of every pod): "
                  + ("[green]yes[/]" if same else "[red]NO[/]"))
    if not same:
        raise typer.Exit(1)


def database_url(db: str) -> str:
    """A SQLAlchemy URL; a plain path means a SQLite file."""
    return db if "://" in db else f"sqlite:///{db}"


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 = every interface)."),
    port: int = typer.Option(8080, min=1, max=65535, help="TCP port."),
    db: str = typer.Option("sqlite:///quasched.db", help=(
        "Database: a SQLAlchemy URL (sqlite:///quasched.db, postgresql+psycopg://user@host/db) or a SQLite file path.")),
    cluster_file: Optional[Path] = typer.Option(None, "--cluster", help=(
        "YAML cluster file registered on the first start (docs/file-formats.md); default: the built-in "
        "synthetic cluster (120 GPU nodes). A database that has nodes keeps them.")),
    policy: str = typer.Option("fgd", help="Placement policy: NAME or NAME:PARAM=VALUE. " + escape(describe_policies())),
    clock: Clock = typer.Option("wall", help=(
        "'wall': the wall clock drives the scheduling loop; 'virtual': a trace drives the same loop at full speed "
        "(no server, no database): each row is submitted at its creation time and runs its trace lifetime, and the "
        "placements are checked against `quasched replay`'s.")),
    trace: str = typer.Option("synthetic", help="With --clock virtual: the trace to drive the loop (openb-*, synthetic)."),
    seed: int = typer.Option(42, help="With --clock virtual: seed of the node tie-break ranks."),
    rng: Rng = typer.Option("native", help=RNG_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
    order: Order = typer.Option("fair", help="Queue order: 'fair' (priority, fair share, decay, submission) or 'fifo'."),
    decay_alpha: Optional[float] = typer.Option(None, min=0, max=1, help="The k-th pending job of one user/app weighs "
                                                "alpha^(k-1) in the queue order (e.g. 0.6); default off."),
    grace: float = typer.Option(30.0, min=0, help="Seconds a preempted job gets to stop."),
    preemption: bool = typer.Option(True, help="Preempt for higher priority and to reclaim borrowed quota."),
    defrag_per_hour: int = typer.Option(0, min=0, help="Job swapping: migrate at most this many running jobs per hour "
                                        "so a waiting multi-GPU job can start (0 = off)."),
    batch_solver: Optional[BatchSolver] = typer.Option(None, help="Batch mode: assign the pending batch every cycle "
                                               "with milp, qubo-sa, qaoa or greedy (default: online placement)."),
    kube_extender: bool = typer.Option(False, "--kube-extender", help=(
        "Serve the kube-scheduler extender under /k8s/scheduler (filter, prioritize, bind) and mirror the "
        "Kubernetes nodes and GPU pods (docs/kubernetes.md). Needs API-server credentials: --kubeconfig, "
        "$KUBECONFIG or ~/.kube/config, or the in-cluster service account. Implies no quasched preemption "
        "(Kubernetes owns evictions); without --cluster the node set is Kubernetes' alone.")),
    kubeconfig: Optional[Path] = typer.Option(None, envvar="KUBECONFIG", help=(
        "With --kube-extender: kubeconfig file of the API server (default: $KUBECONFIG, ~/.kube/config, "
        "else in-cluster credentials).")),
    kube_context: Optional[str] = typer.Option(None, help="With --kube-extender: the kubeconfig context."),
    kube_sync: bool = typer.Option(True, "--kube-sync/--no-kube-sync", help=(
        "With --kube-extender: list and watch nodes and pods (off: the extender works on the registered nodes "
        "and binds through the API server only).")),
) -> None:
    """Run the scheduler service: HTTP API under /api/v1 (docs at /docs), dashboard at /, metrics at /metrics.

    The first start creates an admin token, prints it and writes it to quasched.token beside a
    SQLite database (mode 0600), where the client commands find it."""
    from quasched.policies.registry import parse_specs
    from quasched.traces.errors import TraceError

    if clock == "virtual":
        return serve_virtual(trace, policy, seed, rng, data_dir, cluster_file)
    try:
        specs = parse_specs(policy)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--policy") from None
    if len(specs) != 1:
        raise typer.BadParameter("give one policy", param_hint="--policy")
    cluster = None
    if cluster_file is not None:
        from quasched.traces.cluster_file import load_cluster_file

        try:
            cluster = load_cluster_file(cluster_file)
        except (TraceError, ValueError, OSError) as err:
            fail(str(err))
    import uvicorn

    from quasched.service.api import create_app, sqlite_file
    from quasched.service.controller import LoopOptions

    kube = None
    if kube_extender:
        from quasched.kube.client import KubernetesClient
        from quasched.kube.extender import KubeOptions

        try:
            client = KubernetesClient(str(kubeconfig) if kubeconfig else None, kube_context)
        except Exception as err:  # no kubeconfig, a bad file, no in-cluster credentials
            fail(f"--kube-extender: cannot load Kubernetes credentials: {err}")
        kube = KubeOptions(client=client, sync=kube_sync)  # Kubernetes owns evictions: no preemption, no swapping
        if cluster is None and kube_sync:
            from quasched.service.controller import nodes_of

            cluster = nodes_of([])
    url = database_url(db)
    token_file = None if sqlite_file(url) is not None else TOKEN_FILE
    try:
        options = LoopOptions(policy=str(specs[0]), order="fifo" if order == "fifo" else "fair",
                              decay_alpha=decay_alpha, grace_s=grace, preemption=preemption and kube is None,
                              defrag_per_hour=defrag_per_hour if kube is None else 0, batch_solver=batch_solver)
        service_app = create_app(url, cluster, token_file=token_file, options=options, kube=kube)
    except Exception as err:  # a database that cannot be opened or migrated, a bad cluster
        fail(f"cannot start the service on {db}: {err}")
    service = service_app.state.service
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    console.print(f"quasched serve: {len(service.records)} nodes, policy {specs[0]}, database {url}")
    console.print(f"  API {base}/api/v1 (docs {base}/docs), metrics {base}/metrics")
    if kube is not None:
        console.print(f"  kube-scheduler extender urlPrefix {base}/k8s/scheduler (filter, prioritize, bind)"
                      + ("; nodes and GPU pods synced from the API server" if kube.sync else ""))
    if service.new_admin_token:
        where = f" (saved to {service.token_file})" if service.token_file else ""
        console.print(f"  admin token {service.new_admin_token}{where}")
        console.print(f"  dashboard {base}/#token={service.new_admin_token}")
    else:
        console.print(f"  dashboard {base}/")
    from quasched.kube.nodelay import NoDelayH11Protocol  # TCP_NODELAY: no 40 ms Nagle stall per call

    uvicorn.run(service_app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2,
                http=NoDelayH11Protocol)


def resolve_token(token: str | None) -> str | None:
    """The ``--token``/``$QUASCHED_TOKEN`` value, else the token file ``quasched serve`` wrote, else ``None``."""
    if token:
        return token.strip()
    if TOKEN_FILE.is_file():
        return TOKEN_FILE.read_text().strip() or None
    return None


def api_error(response: Any) -> str:
    """One readable line (or a few) for a 4xx/5xx reply."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = response.text.strip()[:300] or response.reason_phrase
    if isinstance(detail, list):
        lines = []
        for item in detail:
            loc = [str(p) for p in item.get("loc", []) if p not in ("body", "query", "path")]
            lines.append(f"{'.'.join(loc) or 'request'}: {item.get('msg', item)}")
        detail = "; ".join(lines)
    hint = ""
    if response.status_code == 401:
        hint = " (set QUASCHED_TOKEN or --token, or run where quasched serve wrote quasched.token)"
    return f"{response.status_code} {detail}{hint}"


def call(server: str, token: str | None, method: str, path: str, **kwargs: Any) -> Any:
    """``method path`` on the server's API; a clean error (exit 2) when it cannot be reached or refuses."""
    import httpx

    secret = resolve_token(token)
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    url = server.rstrip("/") + "/api/v1" + path
    try:
        response = httpx.request(method, url, headers=headers, timeout=30.0, **kwargs)
    except httpx.ConnectError:
        fail(f"cannot connect to the quasched server at {server} (is `quasched serve` running? see --server)")
    except httpx.TimeoutException:
        fail(f"the quasched server at {server} did not answer in time")
    except httpx.HTTPError as err:
        fail(f"request to {server} failed: {err}")
    if response.status_code >= 400:
        fail(api_error(response))
    return response.json() if response.content else None


def gpus_text(gpus: float) -> str:
    """GPUs as the shortest text (``0.5``, ``8``)."""
    return f"{gpus:g}"


def placement_text(job: dict[str, Any]) -> str:
    """A job's placement as ``node[dev,dev] node[dev]``."""
    parts = []
    for p in job["placement"]:
        devices = ",".join(map(str, p["devices"]))
        parts.append(f"{p['node']}[{devices}]" if devices else p["node"])
    return " ".join(parts)


def age(seconds: float | None) -> str:
    """Time since the epoch second ``seconds`` as ``3d``, ``5h``, ``12m`` or ``40s`` (empty for ``None``)."""
    if seconds is None:
        return ""
    seconds = max(0.0, time.time() - seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


STATE_STYLE = {"running": "green", "pending": "yellow", "preempting": "magenta", "succeeded": "dim",
               "failed": "red", "cancelled": "dim"}


@app.command()
def submit(
    team: str = typer.Option(..., help="The team's queue."),
    name: str = typer.Option(..., help="Job name."),
    gpus: float = typer.Option(0.0, help="GPUs per pod: 0, a share of one device (0.5), or whole GPUs (2)."),
    cpu: float = typer.Option(1.0, help="CPU cores per pod."),
    memory: str = typer.Option("4GiB", help="Memory per pod: 16GiB, 512MiB, 1.5Gi or MiB."),
    duration: Optional[str] = typer.Option(None, help="Run time after which the service finishes it: 2h, 90m, 30s."),
    gpu_model: str = typer.Option("", help="GPU model (e.g. A100); empty = any."),
    pods: int = typer.Option(1, help="Gang size: pods placed all-or-nothing."),
    priority: str = typer.Option("normal", "--priority", help="Priority class: low, normal, high."),
    user: Optional[str] = typer.Option(None, help="User (default: $USER)."),
    app_name: str = typer.Option("", "--app", help="Application name."),
    client_token: Optional[str] = typer.Option(None, help="Idempotency key: resubmitting returns the first job."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Submit a job, e.g. quasched submit --team vision --gpus 0.5 --cpu 4 --memory 16GiB --duration 2h --name resnet-ft."""
    import os

    body: dict[str, Any] = {"name": name, "team": team, "gpus": gpus, "cpu": cpu, "memory": memory,
                            "pods": pods, "priority_class": priority, "gpu_model": gpu_model, "app": app_name,
                            "user": user if user is not None else os.environ.get("USER", "")}
    if duration is not None:
        body["duration"] = duration
    if client_token is not None:
        body["client_token"] = client_token
    job = call(server, token, "POST", "/jobs", json=body)
    where = f" on {placement_text(job)}" if job["placement"] else ""
    reason = f" — {job['reason']['code']}: {job['reason']['message']}" if job.get("reason") else ""
    console.print(f"job {job['id']} ({job['name']}) {job['state']}{where}{reason}")


@app.command()
def jobs(
    state: Optional[str] = typer.Option(None, help="Only jobs in this state: pending, running, preempting, "
                                                   "succeeded, failed, cancelled."),
    team: Optional[str] = typer.Option(None, help="Only this team's jobs."),
    limit: int = typer.Option(50, min=1, max=1000, help="At most this many (newest first)."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """List jobs, newest first."""
    from rich.table import Table

    params: dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = state
    if team:
        params["team"] = team
    rows = call(server, token, "GET", "/jobs", params=params)
    table = Table(title=f"{len(rows)} jobs")
    for column in ("id", "name", "team", "state", "gpus", "pods", "placement", "age", "reason"):
        table.add_column(column, justify="right" if column in ("id", "gpus", "pods") else "left")
    for job in rows:
        reason = job["reason"]
        table.add_row(str(job["id"]), job["name"], job["team"],
                      f"[{STATE_STYLE.get(job['state'], '')}]{job['state']}[/]", gpus_text(job["gpus"]),
                      str(job["pods"]), placement_text(job), age(job["submitted_at"]),
                      f"{reason['code']}: {reason['message']}" if reason else "")
    console.print(table)


@app.command()
def queues(server: str = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Queues: quota, GPUs used and borrowed, fair share, pending and running jobs."""
    from rich.table import Table

    rows = call(server, token, "GET", "/queues")
    table = Table(title="queues")
    for column in ("queue", "cohort", "quota (GPUs)", "used", "borrowed", "fair share", "weight", "pending",
                   "running"):
        table.add_column(column, justify="left" if column in ("queue", "cohort", "quota (GPUs)") else "right")
    for q in rows:
        quota = ", ".join(f"{k}={v:g}" for k, v in q["quota"].items()) or "unlimited"
        table.add_row(q["name"], q["cohort"], quota, f"{q['used_gpus']:g}", f"{q['borrowed_gpus']:g}",
                      f"{q['fair_share_gpus']:.2f}", f"{q['weight']:g}", str(q["pending"]), str(q["running"]))
    console.print(table)


@app.command()
def queue(
    name: str = typer.Argument(..., help="Queue (team) name."),
    quota: list[str] = typer.Option([], help="Nominal GPUs per model, MODEL=N (repeatable; '*=N' covers "
                                             "every model not named). No quota: unlimited."),
    cohort: str = typer.Option("", help="Cohort whose queues lend each other unused quota."),
    borrowing_limit: Optional[float] = typer.Option(None, help="Most GPUs borrowed beyond the quota."),
    weight: float = typer.Option(1.0, help="Fair-share weight."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Create or change a team's queue (needs an admin token)."""
    quotas: dict[str, float] = {}
    for item in quota:
        model, sep, amount = item.partition("=")
        try:
            quotas[model.strip()] = float(amount)
        except ValueError:
            sep = ""
        if not sep or not model.strip():
            fail(f"--quota {item!r}: write MODEL=GPUS, e.g. A100=8 or '*=4'")
    body = {"quota": quotas, "cohort": cohort, "borrowing_limit": borrowing_limit, "weight": weight}
    q = call(server, token, "PUT", f"/queues/{name}", json=body)
    console.print(f"queue {q['name']}: quota {q['quota'] or 'unlimited'}, cohort {q['cohort'] or '-'}, "
                  f"weight {q['weight']:g}")


@app.command()
def nodes(server: str = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Nodes: GPU model, GPUs in use and healthy, CPU and memory in use, cordon, jobs."""
    from rich.table import Table

    rows = call(server, token, "GET", "/nodes")
    table = Table(title=f"{len(rows)} nodes")
    for column in ("node", "model", "GPUs used", "healthy", "CPU used", "memory used", "status", "jobs"):
        table.add_column(column, justify="left" if column in ("node", "model", "status", "jobs") else "right")
    for n in rows:
        healthy = sum(n["gpu_healthy"])
        table.add_row(
            n["name"], n["gpu_model"] or "-", f"{sum(n['gpu_used_milli']) / 1000:g}/{n['num_gpus']}",
            f"{healthy}/{n['num_gpus']}", f"{n['cpu_used_milli'] / 1000:g}/{n['cpu_milli'] / 1000:g}",
            f"{n['memory_used_mib'] / 1024:.0f}/{n['memory_mib'] / 1024:.0f}Gi",
            "[yellow]cordoned[/]" if n["cordoned"] else "ready", " ".join(map(str, n["jobs"])))
    console.print(table)


@app.command()
def cancel(
    job: int = typer.Argument(..., help="Job id."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Cancel a pending or running job."""
    done = call(server, token, "POST", f"/jobs/{job}/cancel")
    console.print(f"job {done['id']} ({done['name']}) {done['state']}")


@app.command()
def token(
    name: str = typer.Argument(..., help="A name for the token (e.g. vision-ci)."),
    team: Optional[str] = typer.Option(None, help="The team the token acts for."),
    admin: bool = typer.Option(False, help="An admin token (no team)."),
    server: str = ServerOption,
    token_: Optional[str] = typer.Option(None, "--token", envvar="QUASCHED_TOKEN", help=TOKEN_HELP,
                                         show_default=False),
) -> None:
    """Create an API token (needs an admin token); prints the secret once."""
    if admin == (team is not None):
        fail("give --team TEAM for a team token, or --admin")
    made = call(server, token_, "POST", "/tokens", json={"name": name, "team": team, "admin": admin})
    console.print(made["token"])


def one_line_summaries(typer_app: typer.Typer) -> None:
    """The command list of ``--help`` shows each docstring's first paragraph with its line breaks (rich
    markup mode): give it that paragraph on one line."""
    for command in typer_app.registered_commands:
        if command.callback is not None and command.short_help is None:
            command.short_help = " ".join((command.callback.__doc__ or "").split("\n\n")[0].split())


one_line_summaries(app)

if __name__ == "__main__":
    app()
