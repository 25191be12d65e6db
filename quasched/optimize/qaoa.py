"""QAOA on a simulated circuit (qiskit + qiskit-aer statevector) for QUBOs of up to ~20 qubits.

With ``x = (1 - z) / 2`` the QUBO becomes an Ising cost ``sum h_k Z_k + sum J_kl Z_k Z_l``;
each of ``layers`` layers applies ``exp(-i gamma C)`` (RZ / RZZ gates) and the
mixer ``RX(2 beta)`` after a uniform superposition. COBYLA (scipy) minimises
the exact expected energy over the simulated statevector; the answer is the
set of bitstrings sampled from the final state, best energy first. Every
run records the probability of the QUBO's ground state(s), computed by full
enumeration, next to what uniform sampling would give.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qiskit import QuantumCircuit, transpile
from qiskit.circuit import ParameterVector
from qiskit_aer import AerSimulator
from scipy.optimize import minimize

from quasched.optimize.assignment import Assignment
from quasched.optimize.decompose import QuboPricer, SubSolver, solve_decomposed
from quasched.optimize.problem import BatchProblem
from quasched.optimize.qubo import PatternQubo, dense

MAX_QUBITS = 20


@dataclass
class QaoaRun:
    """Outcome of one QAOA solve."""

    n_qubits: int
    p_optimum: float  # probability of a ground state in the final state
    p_uniform: float  # the same under uniform sampling
    energy: float  # expected energy reached
    evaluations: int
    seconds: float


@dataclass
class QaoaStats:
    """Every QAOA run of one solve, summarised by :meth:`summary`."""
    runs: list[QaoaRun] = field(default_factory=list)

    def summary(self) -> dict:
        if not self.runs:
            return {"qaoa_runs": 0}
        ratio = [r.p_optimum / r.p_uniform for r in self.runs]
        return {
            "qaoa_runs": len(self.runs),
            "qubits_max": max(r.n_qubits for r in self.runs),
            "p_optimum_mean": float(np.mean([r.p_optimum for r in self.runs])),
            "p_uniform_mean": float(np.mean([r.p_uniform for r in self.runs])),
            "p_ratio_median": float(np.median(ratio)),
            "qaoa_seconds": float(sum(r.seconds for r in self.runs)),
        }


def energies(lin: np.ndarray, quad: np.ndarray, offset: float) -> np.ndarray:
    """QUBO energy of every bitstring, indexed like qiskit's statevector (qubit k = bit k)."""
    n = len(lin)
    x = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)
    return x @ lin + np.einsum("sk,kl,sl->s", x, quad, x) + offset


def circuit(lin: np.ndarray, quad: np.ndarray, layers: int) -> tuple[QuantumCircuit, ParameterVector]:
    """Parameterised QAOA circuit (parameters: gammas then betas)."""
    n = len(lin)
    # x = (1 - z)/2: x_k -> -z_k/2, x_k x_l -> z_k z_l/4 - z_k/4 - z_l/4 (+ constants)
    sym = quad + quad.T - 2 * np.diag(np.diag(quad))
    h = -lin / 2 - np.diag(quad) / 2 - sym.sum(axis=1) / 4
    theta = ParameterVector("theta", 2 * layers)
    qc = QuantumCircuit(n)
    qc.h(range(n))
    for layer in range(layers):
        gamma, beta = theta[layer], theta[layers + layer]
        for k in range(n):
            if abs(h[k]) > 1e-12:
                qc.rz(2 * gamma * h[k], k)
        for k in range(n):
            for m in range(k + 1, n):
                if abs(quad[k, m]) > 1e-12:
                    qc.rzz(2 * gamma * quad[k, m] / 4, k, m)
        qc.rx(2 * beta, range(n))
    qc.save_statevector()
    return qc, theta


def qaoa(lin: np.ndarray, quad: np.ndarray, offset: float = 0.0, *, layers: int = 2, shots: int = 512,
         maxiter: int = 60, seed: int = 0) -> tuple[np.ndarray, QaoaRun]:
    """Run QAOA on a QUBO; returns sampled bitstrings (rows, best energy first) and run statistics."""
    n = len(lin)
    if n > MAX_QUBITS:
        raise ValueError(f"{n} qubits: QAOA here is limited to {MAX_QUBITS}")
    start = time.perf_counter()
    energy = energies(lin, quad, offset)
    scale = max(float(np.abs(energy - energy.mean()).max()), 1e-12)
    qc, theta = circuit(lin / scale, quad / scale, layers)
    sim = AerSimulator(method="statevector", seed_simulator=seed)
    compiled = transpile(qc, sim)
    calls = [0]

    def probabilities(values: np.ndarray) -> np.ndarray:
        bound = compiled.assign_parameters(dict(zip(theta, values)))
        state = np.asarray(sim.run(bound).result().get_statevector())
        calls[0] += 1
        return np.abs(state) ** 2

    def expected(values: np.ndarray) -> float:
        return float(probabilities(values) @ energy)

    start_point = np.concatenate([np.linspace(0.1, 0.8, layers) * np.pi, np.linspace(0.8, 0.1, layers) * np.pi / 2])
    result = minimize(expected, start_point, method="COBYLA", options={"maxiter": maxiter, "rhobeg": 0.3})
    probs = probabilities(result.x)
    ground = energy <= energy.min() + 1e-9 * max(1.0, abs(energy.min()))
    rng = np.random.default_rng(seed)
    drawn = np.unique(rng.choice(2**n, size=shots, p=probs / probs.sum()))
    drawn = drawn[np.argsort(energy[drawn], kind="stable")]
    samples = ((drawn[:, None] >> np.arange(n)[None, :]) & 1).astype(np.int8)
    run = QaoaRun(n, float(probs[ground].sum()), float(ground.mean()), float(probs @ energy),
                  calls[0], time.perf_counter() - start)
    return samples, run


def qaoa_solver(stats: QaoaStats, **options: Any) -> SubSolver:
    """A decomposition sub-solver running :func:`qaoa` and recording each run in ``stats``."""

    def solve(qubo: PatternQubo) -> np.ndarray:
        samples, run = qaoa(*dense(qubo.bqm), seed=len(stats.runs), **options)
        stats.runs.append(run)
        return samples

    return solve


def solve_qaoa(problem: BatchProblem, *, max_qubits: int = 16, layers: int = 2, shots: int = 512,
               maxiter: int = 60, max_slack_bits: int = 3,
               formulations: tuple[tuple[float, float] | None, ...] = ((4.0, 20.0), None),
               time_limit: float = 600.0, polish: bool = True) -> Assignment:
    """The QUBO decomposition with every pricing subproblem solved by QAOA (at most ``max_qubits``).

    By default each question is asked slack-free (unbalanced penalisation, more shapes per
    qubit budget) and with 3-bit slack rows; ``polish=False`` keeps the raw samples.
    """
    stats = QaoaStats()
    pricer = QuboPricer(qaoa_solver(stats, layers=layers, shots=shots, maxiter=maxiter), max_vars=max_qubits,
                        max_slack_bits=max_slack_bits, formulations=formulations, polish=polish)
    result = solve_decomposed(problem, pricer, "qaoa", time_limit)
    result.info.update(stats.summary(), layers=layers, shots=shots)
    return result
