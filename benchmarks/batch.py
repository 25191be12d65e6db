"""The batch optimiser's tables and the QUBO ablation.

    python benchmarks/batch.py table RUN/results.csv [RUN2/results.csv ...]
    python benchmarks/batch.py ablation --data-dir ../shared/traces [--instance qua-greedy] [--machines 10:100:10]

``table``: the tables of BENCHMARKS.md from ``quasched batch --out`` results. Later files override earlier ones for
the same (instance, machines, solver): pass the full run first, then e.g. a MILP-only run whose times were measured
with nothing else running. Entries are jobs / distinct apps / weighted objective; percentages are the weighted
objective over the MILP's proven upper bound. Printed and written to ``results/batch/table.md``; a row the verifier
rejected stops the script.

``ablation``: what the annealer and the classical polish each contribute to QUBO-SA. The decomposition runs three ways
on each instance (default rules): annealer samples polished (the shipped ``qubo-sa``), raw annealer samples, and
uniformly random bits polished; each as a share of the MILP's proven optimum, with its time. Writes
``results/batch/ablation.csv``.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from quasched.extras import require_or_exit
from quasched.optimize.solvers import OPTIONAL_MODULES

SOLVERS = ("greedy-qua", "greedy", "milp", "qubo-sa", "qaoa")
OUT = Path("results/batch")
#: the three ways the ablation runs the decomposition: the solver options of each
VARIANTS = {"SA + polish": {}, "SA raw": {"polish": False}, "random + polish": {"sampler": "random"}}


def load(paths: list[Path]) -> dict[tuple[str, int, str], dict]:
    rows: dict[tuple[str, int, str], dict] = {}
    for path in paths:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["verified"] != "True":
                    raise SystemExit(f"{path}: {row['instance']}@{row['machines']} {row['solver']} failed the verifier")
                rows[(row["instance"], int(row["machines"]), row["solver"])] = row
    return rows


def entry(row: dict | None) -> str:
    if row is None:
        return ""
    return "no answer" if row["status"] == "no_answer" else f"{row['jobs']}/{row['apps']}/{float(row['weighted']):.3f}"


def milp_cell(row: dict | None) -> str:
    if row is None:
        return ""
    bound, status, time = float(row["bound"]), row["status"], float(row["time"])
    if status == "optimal":
        return f"{bound:.3f} **optimal**, {time:.1f} s"
    return f"{bound:.3f} {status}, {100 * float(row['gap']):.3f} %, {time:.1f} s"


def share_cell(row: dict | None, bound: float | None) -> str:
    if row is None:
        return ""
    share = f" ({100 * float(row['weighted']) / bound:.1f} %)" if bound else ""
    return f"{entry(row)}{share}, {float(row['time']):.0f} s"


def table(rows: dict[tuple[str, int, str], dict]) -> str:
    lines = ["| instance | M | greedy-qua | greedy | MILP | MILP bound, status, gap, time "
             "| QUBO-SA (% of bound), time | QAOA (% of bound), time |",
             "|---|---|---|---|---|---|---|---|"]
    for instance, machines in sorted({(i, m) for i, m, _ in rows}):
        got = {s: rows.get((instance, machines, s)) for s in SOLVERS}
        bound = float(got["milp"]["bound"]) if got["milp"] else None
        lines.append(f"| {instance} | {machines} | {entry(got['greedy-qua'])} | {entry(got['greedy'])} "
                     f"| {entry(got['milp'])} | {milp_cell(got['milp'])} | {share_cell(got['qubo-sa'], bound)} "
                     f"| {share_cell(got['qaoa'], bound)} |")
    return "\n".join(lines)



def ablation(data_dir: Path | None, instance: str, machines: str, milp_seconds: float) -> None:
    """Print and write the ablation (module docstring)."""
    from quasched.cli.batch import parse_machines
    from quasched.optimize.instances import qua_jobs, qua_problem
    from quasched.optimize.solvers import solve
    from quasched.traces.catalog import trace_info
    from quasched.traces.datadir import resolve_trace
    from quasched.traces.dlrm import load_dlrm

    jobs = qua_jobs(load_dlrm(resolve_trace(trace_info("dlrm-2025").path, data_dir)), instance)
    print("| M | optimum | " + " | ".join(f"{v} %" for v in VARIANTS) + " | s: " + " / ".join(VARIANTS) + " |")
    print("|---" * 6 + "|")
    rows = []
    for m in parse_machines(machines):
        problem = qua_problem(jobs, m)
        exact = solve(problem, "milp", time_limit=milp_seconds)
        if exact.status != "optimal":
            raise SystemExit(f"the MILP did not prove {instance}@{m} optimal in {milp_seconds:g} s (raise --milp-seconds)")
        share, took = [], []
        for name, options in VARIANTS.items():
            start = time.perf_counter()
            answer = solve(problem, "qubo-sa", **options)  # solve() runs the independent verifier
            took.append(time.perf_counter() - start)
            if not answer.verdict.feasible:
                raise SystemExit(f"{name} on {instance}@{m}: infeasible answer")
            share.append(100 * answer.verdict.weighted / exact.objective)
            rows.append({"instance": instance, "machines": m, "variant": name, "objective": answer.verdict.weighted,
                         "optimum": exact.objective, "percent": share[-1], "time": took[-1]})
        print(f"| {m} | {exact.objective:.3f} | " + " | ".join(f"{v:.2f}" for v in share) + " | "
              + " / ".join(f"{t:.0f}" for t in took) + " |", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "ablation.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    tables = commands.add_parser("table", help="BENCHMARKS.md's tables from quasched batch --out results")
    tables.add_argument("results", type=Path, nargs="+", help="results.csv files of quasched batch --out")
    ablate = commands.add_parser("ablation", help="the annealer's and the polish's share of QUBO-SA's result")
    ablate.add_argument("--data-dir", type=Path, default=None, help="folder holding the traces")
    ablate.add_argument("--instance", default="qua-greedy", choices=("qua-greedy", "qua-qubo"))
    ablate.add_argument("--machines", default="10:100:10", help="machine counts: start:stop:step or a list")
    ablate.add_argument("--milp-seconds", type=float, default=60.0, help="time limit of the MILP giving the optimum")
    args = parser.parse_args()
    if args.command == "ablation":
        require_or_exit("quantum", *OPTIONAL_MODULES["qubo-sa"])
        ablation(args.data_dir, args.instance, args.machines, args.milp_seconds)
        return
    text = table(load(args.results))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
