"""Benchmark: QAOA on pricing subproblems of qua-greedy@10 (8..20 qubits) vs uniform sampling and annealing.

Usage: python benchmarks/batch_qaoa.py --data-dir ../shared/traces [--qubits 8,12,16,20] [--layers 1,2,3]
Prints, per subproblem size and depth: p(ground state) after QAOA, the uniform
probability, their ratio, circuit evaluations and wall time; and the share of
simulated-annealing reads that reach the ground state.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from quasched.optimize.anneal import annealer
from quasched.optimize.classes import job_classes
from quasched.optimize.colgen import Master, shapes
from quasched.optimize.instances import qua_jobs, qua_problem
from quasched.optimize.qaoa import energies, qaoa
from quasched.optimize.qubo import dense, pattern_qubo
from quasched.traces.catalog import trace_info
from quasched.traces.datadir import resolve_trace
from quasched.traces.dlrm import load_dlrm


def subproblem(sh, pi, n_qubits: int):
    """The pricing QUBO of the first CG iteration, shapes trimmed to at most ``n_qubits`` variables."""
    order = np.flatnonzero((pi > 1e-9) & (sh.fit[0] > 0))
    order = order[np.argsort(-pi[order], kind="stable")]
    for k in range(len(order), 0, -1):
        q = pattern_qubo(sh.demand, sh.capacity[0], sh.fit[0], sh.hi[0], sh.lo_only[0], pi, order[:k],
                         max_slack_bits=3)
        if q.n_vars <= n_qubits:
            return q
    raise ValueError("no subproblem that small")


def main(data_dir: Optional[Path] = typer.Option(None, help="Directory holding the trace files."),
         qubits: str = typer.Option("8,12,16,20", help="Subproblem sizes (qubits, at most 20)."),
         layers: str = typer.Option("1,2,3", help="QAOA depths."),
         maxiter: int = typer.Option(80, help="COBYLA iterations.")) -> None:
    workload = load_dlrm(resolve_trace(trace_info("dlrm-2025").path, data_dir))
    problem = qua_problem(qua_jobs(workload, "qua-greedy"), 10)
    sh = shapes(problem, job_classes(problem))
    master = Master(sh, problem.weight)
    for s in range(sh.n_shapes):
        a = np.zeros(sh.n_shapes, dtype=np.int64)
        a[s] = max(1, sh.fit[0, s] // 2) if sh.fit[0, s] else 0
        master.add(0, a)
    m, *_ = master.build(integer=False)
    pi, _ = master.duals(m.solve().row_dual)
    table = Table(title="QAOA on pricing QUBOs of qua-greedy@10 (qiskit-aer statevector)")
    for col in ("qubits", "layers", "p(opt) QAOA", "p(opt) uniform", "ratio", "evals", "QAOA s",
                "SA reads at opt", "SA s"):
        table.add_column(col, justify="right")
    for n in (int(v) for v in qubits.split(",")):
        q = subproblem(sh, pi, n)
        lin, quad, offset = dense(q.bqm)
        ground = energies(lin, quad, offset).min()
        start = time.perf_counter()
        reads = annealer(reads=100, sweeps=1000)(q)
        sa_time = time.perf_counter() - start
        sa_hit = np.mean([q.bqm.energy(dict(enumerate(r))) <= ground + 1e-9 for r in reads])
        for p in (int(v) for v in layers.split(",")):
            _, run = qaoa(lin, quad, offset, layers=p, maxiter=maxiter)
            table.add_row(str(q.n_vars), str(p), f"{run.p_optimum:.4f}", f"{run.p_uniform:.2e}",
                          f"{run.p_optimum / run.p_uniform:.1f}", str(run.evaluations), f"{run.seconds:.2f}",
                          f"{sa_hit:.2f}", f"{sa_time:.2f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    typer.run(main)
