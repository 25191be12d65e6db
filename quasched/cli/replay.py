"""``quasched replay``: the time-based replay with its carbon options and the GPU failure model's
options (own help panel), turned into a ``FailureConfig`` whose errors name the options."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Literal, Optional

import typer

from quasched.cli.common import (
    POLICY_HELP, ClusterOption, DataDirOption, Rng, RngOption, WorkloadOption, console, fail, finite, load_inputs,
    native_seed, output_dir, parse_policies, parse_seeds, progress_bar,
)
from quasched.report.wording import counted

# Choices of options (typer shows them as <a|b> and rejects anything else).
Migrate = Literal["off", "device", "node"]
MigrateRule = Literal["always", "pays", "pays_lindy"]
MigrateAt = Literal["now", "checkpoint"]
LiftRun = Literal["mean", "known"]
Departure = Literal["duration", "trace"]
MissingCreation = Literal["start", "skip"]


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


def replay(
    ctx: typer.Context,
    trace: str = typer.Option("synthetic", help="Trace with pod creation times: synthetic (no download), dlrm-2025, openb-*."),
    policy: str = typer.Option("fgd", help=POLICY_HELP),
    seeds: str = typer.Option("42", help="Seeds: 42, 42-51 or 42,45,50 (node tie-break ranks, Random)."),
    departure: Departure = typer.Option(
        "duration", help="A pod runs its trace lifetime from placement, or leaves at its trace deletion time."),
    missing_creation: MissingCreation = typer.Option(
        "start", help="Rows without creation time arrive at trace start, or are skipped."),
    headroom: float = typer.Option(1.0, min=0.01, callback=finite,
                                   help="DLRM only: nodes = peak concurrent demand × headroom."),
    rng: Rng = RngOption,
    data_dir: Optional[Path] = DataDirOption,
    cluster_file: Optional[Path] = ClusterOption,
    workload_file: Optional[Path] = WorkloadOption,
    out: Optional[Path] = typer.Option(None, help="Write per-event CSVs, per-pod waits and a summary CSV here."),
    carbon_zone: Optional[str] = typer.Option(
        None, help="Grid zone of the hourly carbon intensity (e.g. DE-LU): adds kg CO2e. Electricity Maps (ODbL)."),
    carbon_dir: Optional[Path] = typer.Option(
        None, help="Folder of carbon_intensity_2023_hourly.csv (else $QUASCHED_CARBON)."),
    carbon_start: str = typer.Option("2023-01-01T00:00", help="UTC time of the first event on the (yearly) series."),
    pue: float = typer.Option(1.0, min=1.0, callback=finite,
                              help="Power usage effectiveness (facility / IT energy) for energy and carbon."),
    failure_rate: float = _failures(0.0, "GPU failures per GPU-hour (0: none; 2e-5: Llama 3's on H100s)."),
    failure_seed: int = _failures(0, "Seed of the failures (the same for every policy)."),
    checkpoint_min: float = _failures(30.0, "Minutes of progress between a pod's checkpoints."),
    restart_min: float = _failures(0.0, "Minutes a restarted pod spends reloading (counted as lost)."),
    transient_share: float = _failures(0.5, "Share of failures cleared by a reset (else a repair)."),
    reset_min: float = _failures(10.0, "Minutes a transiently failed GPU is down."),
    repair_h: float = _failures(24.0, "Mean hours to repair a fatally failed GPU."),
    flaky_share: float = _failures(0.05, "Share of nodes that fail more often (drawn per failure seed)."),
    flaky_factor: float = _failures(20.0, "How many times more often flaky nodes fail (same mean rate)."),
    precursor_share: float = _failures(0.5, "Share of fatal failures a warning announces: set it from your logs."),
    precursor_ahead_h: float = _failures(24.0, "Mean hours from a warning to its fatal failure."),
    false_warnings: float = _failures(1.0, "Warnings followed by nothing, per true warning."),
    drain_errors: int = _failures(0, "Drain a node after this many errors in --drain-window-h (0: never)."),
    drain_window_h: float = _failures(168.0, "Hours over which a node's errors count towards a drain."),
    drain_h: float = _failures(72.0, "Hours a drained node stays cordoned (inf: for good)."),
    drain_flaky: float = _failures(0.0, "Drain a node while P(it is flaky) is at least this (0: never)."),
    drain_lift: float = _failures(0.0, "Lift a drain for a pod that waited this × its expected loss (0: never)."),
    drain_lift_run: LiftRun = _failures("mean", "Run time --drain-lift prices: the mean GPU pod's, or known."),
    migrate: Migrate = _failures("off", "Checkpoint-and-migrate after an error or warning: that GPU's or node's pods."),
    evict: bool = _failures(False, "A drain also checkpoints and migrates the node's running pods."),
    checkpoint_cost_min: float = _failures(1.0, "Minutes an on-demand checkpoint holds a pod's GPUs (lost)."),
    migrate_rule: MigrateRule = _failures("always", "Move always, or when staying costs more (remaining run known / guessed)."),
    migrate_at: MigrateAt = _failures("now", "With 'pays': let a move wait for the pod's next checkpoint."),
) -> None:
    """Time-based replay: pods arrive at their creation time, queue (FIFO) until they fit, run and depart.

    Reports waiting, allocation, fragmentation, power, energy, carbon (--carbon-zone) and, with --failure-rate, lost
    GPU-hours and goodput; --policy health with --drain-errors and --migrate handle failing GPUs (docs/simulator.md)."""
    from quasched.report.replay import replay_table, write_replay
    from quasched.sim.replay import run_replay
    from quasched.traces.catalog import inputs_label, trace_info
    from quasched.traces.dlrm import dlrm_cluster

    policies, seed_list = parse_policies(policy), parse_seeds(seeds, rng)
    native_seed(failure_seed, "--failure-seed")  # the failure process always draws from NumPy's stream
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
                flaky_factor=flaky_factor, precursor_share=precursor_share, precursor_ahead_h=precursor_ahead_h,
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
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # NumPy only warns of a time zone (and converts it)
                start_at = np.datetime64(carbon_start, "s")
            valid = not np.isnat(start_at)
        except (ValueError, Warning):  # a UserWarning since NumPy 2.0, a DeprecationWarning before
            valid = False
        if not valid:
            fail(f"--carbon-start {carbon_start!r} is not a UTC time; write e.g. 2023-06-01T00:00, without a time zone")
        try:
            carbon = load_carbon(carbon_zone, carbon_dir)
        except ValueError as err:
            fail(str(err))
    nodes, workload = load_inputs(trace, data_dir, cluster_file, workload_file)
    if cluster_file is None and trace_info(trace).kind == "dlrm":
        nodes = dlrm_cluster(workload, headroom=headroom)
    trace = inputs_label(trace, cluster_file, workload_file)
    console.print(f"[bold]{trace}[/]: {counted(len(workload), 'pod')} on {counted(len(nodes), 'node')} "
                  f"({counted(nodes.total_gpus, 'GPU')})")
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
        console.print(f"wrote {counted(len(written), 'file')} to {out}")
