"""``quasched batch``: every solver on Qua's instances, verified, as a table, CSV and plots."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Sequence

import typer
from rich.console import Console
from rich.markup import escape

from quasched.report.wording import counted

if TYPE_CHECKING:
    from quasched.optimize.assignment import Assignment

console = Console(width=None if sys.stdout.isatty() else 150)
#: Shown in --help without importing the solvers; tests check them against the registries.
INSTANCE_NAMES = ("qua-greedy", "qua-qubo")
SOLVER_NAMES = ("greedy-qua", "greedy", "milp", "qubo-sa", "qaoa")
#: run when --solvers is not given, less those whose extra is not installed
DEFAULT_SOLVERS = ("greedy-qua", "greedy", "milp", "qubo-sa")


MAX_MACHINES = 10_000  # Qua's instances go to 100; 10^8 machines built a problem until memory ran out


def parse_machines(text: str) -> list[int]:
    """``10:100:10`` (start:stop:step, inclusive), ``10,20`` or ``10``."""
    try:
        if ":" in text:
            start, stop, step = (int(v) for v in text.split(":"))
            counts: Sequence[int] = range(start, stop + 1, step)  # checked before it is listed
        else:
            counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"bad machine list {text!r}: use 10:100:10 or 10,20,30",
                                 param_hint="--machines") from exc
    ends = sorted(counts) if isinstance(counts, list) else sorted((counts[0], counts[-1])) if counts else []
    if not ends or ends[0] < 1 or ends[-1] > MAX_MACHINES:
        shown = f"{ends[0]}..{ends[-1]}" if ends else "no machine counts"
        raise typer.BadParameter(f"{text!r} gives {shown}: every count must be 1 to {MAX_MACHINES:,} "
                                 "(start:stop:step with start <= stop)", param_hint="--machines")
    return list(counts)


def parse_list(text: str, known: Collection[str], what: str) -> list[str]:
    """Comma-separated names of ``text``, each one of ``known`` (a ``typer.BadParameter`` naming ``--{what}s`` else)."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in known]
    if unknown or not names:
        given = f"unknown {what} {unknown}" if unknown else f"no {what} given"
        raise typer.BadParameter(f"{given}; choose from {', '.join(known)}", param_hint=f"--{what}s")
    return names


def installed_solvers(text: str | None) -> list[str]:
    """The solvers of ``--solvers`` (each installed, else :class:`~quasched.extras.MissingExtra`); without it
    :data:`DEFAULT_SOLVERS` less those whose extra is missing, each skip printed with the ``pip install`` adding it."""
    from quasched.extras import MissingExtra
    from quasched.optimize.solvers import SOLVERS, check_installed

    if text is not None:
        chosen = parse_list(text, SOLVERS, "solver")
        for name in chosen:
            check_installed(name)
        return chosen
    chosen = []
    for name in DEFAULT_SOLVERS:
        try:
            check_installed(name)
            chosen.append(name)
        except MissingExtra as err:
            console.print(f"[yellow]note:[/] skipping {name}: {escape(str(err))}")
    return chosen


def row(instance: str, machines: int, result: Assignment) -> dict:
    """One results row of ``result`` on ``instance`` with ``machines`` machines (verified figures)."""
    v = result.verdict
    assert v is not None, "solve() attaches the verifier's verdict"
    return {
        "instance": instance, "machines": machines, "solver": result.solver, "status": result.status,
        "jobs": v.jobs, "apps": v.apps, "weighted": round(v.weighted, 6),
        "bound": None if result.bound is None else round(result.bound, 6),
        "gap": None if result.gap is None else round(result.gap, 8),
        "time": round(result.time, 3), "verified": v.feasible, "violations": v.n_violations,
        "message": result.message, "info": json.dumps(result.info, default=float),
    }


def verified_cell(r: dict) -> str:
    """✓ (the verifier passed), ✗ with the violations, or – when the solver gave no answer."""
    if r["status"] == "no_answer":
        return "–"
    return "✓" if r["verified"] else f"✗ ({r['violations']})"


def batch(
    trace: str = typer.Option("dlrm-2025", help="Trace to build the instances from (only dlrm-2025 has Qua's instances)."),
    instances: str = typer.Option(",".join(INSTANCE_NAMES), help="Comma-separated instances: qua-greedy, qua-qubo."),
    machines: str = typer.Option("10:100:10", help="Machine counts: start:stop:step (inclusive) or a comma list."),
    solvers: str | None = typer.Option(
        None, show_default=False, help=f"Comma-separated solvers from: {', '.join(SOLVER_NAMES)}. Default: "
        f"{','.join(DEFAULT_SOLVERS)}, less qubo-sa when the quantum extra is not installed (it says so)."),
    rules: str = typer.Option("default", help="default: symmetric heavy rule 0.4 on CPU/GPU/memory and "
                              "max_instance_per_node enforced; qua: Qua's rules (CPU 0.4, GPU 0.4 vs 0.3, "
                              "memory not heavy, no per-node app limit)."),
    objective: str = typer.Option("weighted", help="weighted (Qua's priority-weighted jobs) or lexicographic "
                                  "(then the most jobs)."),
    alpha: float = typer.Option(0.6, min=0, max=1, help="Fairness decay: the k-th job of an app weighs alpha**(k-1)."),
    heavy: float = typer.Option(0.4, min=0, max=1, help="Heavy-job share threshold of the default rule."),
    time_limit: float = typer.Option(10.0, min=0.01, help="MILP time limit per instance, seconds."),
    mip_gap: float = typer.Option(1e-6, min=0, help="MILP relative gap accepted as optimal (HiGHS's own default is 1e-4)."),
    qaoa_max_machines: int = typer.Option(10, min=0, help="Run qaoa only on instances with at most this many machines "
                                          "(it simulates circuits: slow)."),
    seed: int = typer.Option(0, min=0, help="Seed of the simulated annealer (qubo-sa)."),
    polish: bool = typer.Option(True, "--polish/--no-polish", help="Polish QUBO samples classically (qubo-sa, "
                                "qaoa: repair, then add/swap moves); --no-polish keeps the raw samples."),
    out: Path | None = typer.Option(None, help="Folder for results.csv and PNG plots (jobs, apps, weighted)."),
    data_dir: Path | None = typer.Option(None, help="Directory holding the trace files; default $QUASCHED_DATA, "
                                            "then the user cache."),
) -> None:
    """Solve Qua's job-assignment instances with every solver; verify and tabulate every answer."""
    from rich.table import Table

    from quasched.cli.common import fail
    from quasched.optimize.instances import INSTANCES, qua_jobs, qua_problem
    from quasched.optimize.plots import METRICS, plot_metric
    from quasched.optimize.problem import OBJECTIVES, HeavyRule
    from quasched.optimize.provenance import highs_version
    from quasched.optimize.solvers import solve
    from quasched.traces.catalog import trace_info
    from quasched.traces.datadir import resolve_trace
    from quasched.traces.dlrm import load_dlrm
    from quasched.traces.errors import TraceError

    if trace != "dlrm-2025":
        raise typer.BadParameter("only dlrm-2025 defines Qua's instances", param_hint="--trace")
    names = parse_list(instances, INSTANCES, "instance")
    if out is not None:  # before any solve: a folder that cannot be written fails at once
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise typer.BadParameter(f"cannot create {out} ({err.strerror})", param_hint="--out") from None
    chosen = installed_solvers(solvers)
    counts = parse_machines(machines)
    if rules not in ("default", "qua"):
        raise typer.BadParameter("choose default or qua", param_hint="--rules")
    if objective not in OBJECTIVES:
        raise typer.BadParameter(f"choose from {', '.join(OBJECTIVES)}", param_hint="--objective")
    try:
        workload = load_dlrm(resolve_trace(trace_info(trace).path, data_dir))
    except TraceError as err:  # a missing or malformed trace file: a clean error, not a traceback
        fail(str(err))
    options: dict[str, dict[str, Any]] = {
        "milp": {"time_limit": time_limit, "rel_gap": mip_gap}, "qubo-sa": {"seed": seed, "polish": polish},
        "qaoa": {"polish": polish}}
    rows = []
    table = Table(title=f"Batch assignment ({rules} rules, {objective} objective, alpha {alpha:g})")
    for col in ("instance", "machines", "solver", "jobs", "apps", "weighted", "bound", "gap", "of MILP bound",
                "time s", "status", "verified"):
        table.add_column(col, justify="left" if col in ("instance", "solver", "status") else "right")
    for name in names:
        jobs = qua_jobs(workload, name)
        for m in counts:
            extra = {} if rules == "qua" else {"heavy": HeavyRule.symmetric(heavy)}
            problem = qua_problem(jobs, m, compat=rules == "qua", alpha=alpha, objective=objective, **extra)
            here = [row(name, m, solve(problem, s, **options.get(s, {})))
                    for s in chosen if s != "qaoa" or m <= qaoa_max_machines]
            bound = next((r["bound"] for r in here if r["solver"] == "milp" and r["bound"]), None)
            for r in here:
                r["of_milp_bound"] = None if bound is None else round(r["weighted"] / bound, 6)
                table.add_row(name, str(m), r["solver"], str(r["jobs"]), str(r["apps"]), f"{r['weighted']:.4f}",
                              "" if r["bound"] is None else f"{r['bound']:.4f}",
                              "" if r["gap"] is None else f"{100 * r['gap']:.3f}%",
                              "" if bound is None else f"{100 * r['of_milp_bound']:.2f}%", f"{r['time']:.2f}",
                              r["status"], verified_cell(r))
            rows += here
    console.print(table)
    for r in rows:
        if r["message"]:
            console.print(f"{r['instance']}@{r['machines']} {r['solver']}: {r['message']}")
    if out is not None:
        with open(out / "results.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[*rows[0], "highspy"])
            writer.writeheader()
            writer.writerows({**r, "highspy": highs_version()} for r in rows)
        for name in names:
            for metric in METRICS:
                plot_metric(rows, name, metric, out / f"{name}-{metric}.png")
        console.print(f"wrote {out / 'results.csv'} and {counted(len(names) * len(METRICS), 'plot')}")
    if not all(r["verified"] or r["status"] == "infeasible" for r in rows):
        raise typer.Exit(1)
