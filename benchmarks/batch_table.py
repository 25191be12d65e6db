"""BENCHMARKS.md's batch tables from ``quasched batch --out`` results.

Usage: python benchmarks/batch_table.py RUN/results.csv [RUN2/results.csv ...]

Later files override earlier ones for the same (instance, machines, solver): pass the full
run first, then e.g. a MILP-only run whose times were measured with nothing else running.
Entries are jobs / distinct apps / weighted objective; percentages are the weighted
objective over the MILP's proven upper bound. The table is printed and written to ``results/batch/table.md``.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

SOLVERS = ("greedy-qua", "greedy", "milp", "qubo-sa", "qaoa")
#: where the table is also written
OUT = Path("results/batch/table.md")


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
    return "" if row is None else f"{row['jobs']}/{row['apps']}/{float(row['weighted']):.3f}"


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


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    text = table(load([Path(p) for p in sys.argv[1:]]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text + "\n")
    print(text)
