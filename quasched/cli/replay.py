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
    rng: Rng = RngOption,
    data_dir: Optional[Path] = DataDirOption,
    cluster_file: Optional[Path] = ClusterOption,
    workload_file: Optional[Path] = WorkloadOption,
    out: Optional[Path] = typer.Option(None, help="Write per-event CSVs, per-pod waits and a summary CSV here."),
    carbon_zone: Optional[str] = typer.Option(
        None, help="Grid zone of the hourly carbon intensity (e.g. DE-LU, US-CAL-CISO): adds kg CO2e to the "
        "summary. Data: Electricity Maps (ODbL)."),
    carbon_dir: Optional[Path] = typer.Option(
        None, help="Folder of carbon_intensity_2023_hourly.csv (else $QUASCHED_CARBON)."),
    carbon_start: str = typer.Option("2023-01-01T00:00", help="UTC time of the trace's first event on the "
                                     "intensity series (the series wraps around its year)."),
    pue: float = typer.Option(1.0, min=1.0, callback=finite,
                              help="Power usage effectiveness (facility / IT energy) for energy and carbon."),
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
    precursor_share: float = _failures(0.5, "Share of fatal failures preceded by a non-fatal warning on the same "
                                       "GPU (e.g. a pending row remap): a property of your fleet, set it from "
                                       "your logs; 0 = none."),
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
