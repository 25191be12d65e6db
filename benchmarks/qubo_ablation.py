"""Benchmark: what the annealer and the classical polish each contribute to QUBO-SA.

Usage: python benchmarks/qubo_ablation.py --data-dir ../shared/traces [--instance qua-greedy]
       [--machines 10:100:10] [--out results/qubo-ablation.csv]
Runs the QUBO decomposition three ways on each instance (default rules): annealer
samples polished (the shipped ``qubo-sa``), raw annealer samples (no polish), and
uniformly random bit vectors polished (no annealer), and prints each as a share of
the MILP's proven optimum with time and column-generation statistics.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from quasched.cli.batch import parse_machines
from quasched.optimize.instances import qua_jobs, qua_problem
from quasched.optimize.solvers import solve
from quasched.traces.catalog import trace_info
from quasched.traces.datadir import resolve_trace
from quasched.traces.dlrm import load_dlrm

VARIANTS = {"SA + polish": {}, "SA raw": {"polish": False}, "random + polish": {"sampler": "random"}}


def main(data_dir: Path | None = typer.Option(None, help="Directory holding the trace files."),
         instance: str = typer.Option("qua-greedy", help="qua-greedy or qua-qubo."),
         machines: str = typer.Option("10:100:10", help="Machine counts (start:stop:step or a list)."),
         out: Path = typer.Option(Path("results/qubo-ablation.csv"), help="CSV of every run.")) -> None:
    jobs = qua_jobs(load_dlrm(resolve_trace(trace_info("dlrm-2025").path, data_dir)), instance)
    table = Table(title=f"QUBO decomposition ablation on {instance} (default rules): % of proven optimum")
    for col in ("machines", "optimum", *(f"{v} %" for v in VARIANTS), *(f"{v} s" for v in VARIANTS)):
        table.add_column(col, justify="right")
    rows = []
    for m in parse_machines(machines):
        problem = qua_problem(jobs, m)
        exact = solve(problem, "milp")
        if exact.status != "optimal":
            raise typer.BadParameter(f"MILP did not prove {instance}@{m} optimal", param_hint="--machines")
        share, took = [], []
        for name, options in VARIANTS.items():
            start = time.perf_counter()
            answer = solve(problem, "qubo-sa", **options)
            took.append(time.perf_counter() - start)
            verdict = answer.verdict  # solve() runs the independent verifier
            if not verdict.feasible:
                raise RuntimeError(f"{name} on {instance}@{m}: infeasible answer")
            share.append(100 * verdict.weighted / exact.objective)
            rows.append({"instance": instance, "machines": m, "variant": name, "objective": verdict.weighted,
                         "optimum": exact.objective, "percent": share[-1], "time": took[-1],
                         "subproblems": answer.info.get("subproblems"),
                         "columns": answer.info.get("cg_columns")})
        table.add_row(str(m), f"{exact.objective:.4f}", *(f"{v:.2f}" for v in share), *(f"{t:.1f}" for t in took))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    Console().print(table)


if __name__ == "__main__":
    typer.run(main)
