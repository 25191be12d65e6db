"""What every command shares: the console, option help texts and value checks (seeds, policies,
finite multiples), the clean ``error: ...`` exit, ``--out`` creation, loading a trace or its
replacement files, the curve binning of ``--rng`` and the progress bar."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, NoReturn

import typer
from rich.console import Console
from rich.markup import escape


if TYPE_CHECKING:
    from rich.progress import Progress

    from quasched.model.nodes import NodeSpec
    from quasched.model.workload import Workload
    from quasched.sim.sweep import CurveFunction

# Command bodies import NumPy, pandas, matplotlib and the engines, so --help starts fast.

console = Console(width=None if sys.stdout.isatty() else 140)

DATA_DIR_HELP = (
    "Directory holding the trace files (e.g. ../shared/traces). Default: $QUASCHED_DATA, "
    "then the user cache (~/.cache/quasched)."
)
POLICY_HELP = ("Policy specs, comma-separated, each NAME or NAME:PARAM=VALUE (e.g. fgd,guard:delta=8,bestfit), or "
               "'all' (the six paper policies); `quasched policies` lists them.")
RNG_HELP = ("Random stream: 'native' uses NumPy; 'go' reproduces the FGD artifact's Go simulator "
            "bit for bit (Go's math/rand, seeded from the packaged rngCooked table).")
CLUSTER_HELP = "YAML cluster file replacing the trace's nodes (docs/file-formats.md), e.g. examples/cluster.yaml."
WORKLOAD_HELP = "Workload file (.csv, .jsonl) replacing the trace's pods (docs/file-formats.md)."


Rng = Literal["go", "native"]
MAX_MULTIPLE = 100.0  # of --tune, --headroom and --pue
MAX_SEEDS = 100_000  # one run each: more is a typo (1-1000000000 would build a list of 10^9 seeds first)

# Options several commands share (typer reads an option's declaration; one object may serve many commands).
RngOption = typer.Option("native", help=RNG_HELP)
DataDirOption = typer.Option(None, help=DATA_DIR_HELP)
ClusterOption = typer.Option(None, "--cluster", help=CLUSTER_HELP)
WorkloadOption = typer.Option(None, "--workload", help=WORKLOAD_HELP)


def finite_option(example: str = "", most: float = math.inf) -> Callable[[float | None], float | None]:
    """An option callback refusing NaN, infinity and values above ``most`` (none: the option's default), the error
    showing ``example`` as the fix (e.g. ``--days inf`` would replay one window for ever)."""
    fix = f"; write {example}" if example else ""

    def check(value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a finite number{fix}")
        if value is not None and value > most:
            raise typer.BadParameter(f"{value:g} is above {most:g}{fix}")
        return value

    return check


#: a multiple (``--tune``, ``--headroom``, ``--pue``): infinity, or more than :data:`MAX_MULTIPLE`, would size the
#: workload or cluster until memory ran out (or give infinite energy)
finite = finite_option("a multiple such as 1.3", MAX_MULTIPLE)
#: a plain number sent to or kept by the service (``--gpus``, ``--weight``, ``--grace``): JSON holds no NaN or
#: infinity, and a grace period of inf would never end
finite_number = finite_option()


def native_seed(seed: int, option: str) -> None:
    """A clear error naming ``option`` for a negative seed of NumPy's stream (Go's takes any)."""
    if seed < 0:
        raise typer.BadParameter(f"{seed} is negative: the native random stream takes seeds from 0 "
                                 "(--rng go takes any)", param_hint=option)


def parse_seeds(text: str, rng: Rng = "native") -> list[int]:
    """``42``, ``42-51`` or ``42,45,50`` → list of seeds (negative ones only for ``rng="go"``); a clear
    ``--seeds`` error otherwise."""
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
        if len(seeds) + last - first >= MAX_SEEDS:
            raise typer.BadParameter(f"{part!r}: more than {MAX_SEEDS:,} seeds in all", param_hint="--seeds")
        seeds += range(first, last + 1)
    if not seeds:
        raise typer.BadParameter(f"no seeds in {text!r}: write 42, 42-51 or 42,45,50", param_hint="--seeds")
    if rng == "native":
        native_seed(min(seeds), "--seeds")
    return seeds


def parse_policies(text: str) -> list[str]:
    """Policy specs from ``all`` (the six paper policies) or ``fgd,guard:delta=8,bestfit``."""
    from quasched.policies.registry import parse_specs

    try:
        return [str(spec) for spec in parse_specs(text)]
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--policy") from None


def fail(message: str) -> NoReturn:
    """Print ``error: message`` and exit with code 2 (no traceback)."""
    console.print(f"[bold red]error:[/] {escape(message)}", emoji=False)
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
