"""Batch optimisation: Qua's job-assignment problem, solved by greedy, MILP, QUBO and QAOA, always verified."""

from quasched.optimize.assignment import Assignment
from quasched.optimize.problem import BatchProblem, HeavyRule, from_workload
from quasched.optimize.verify import Verdict, verify

__all__ = ["Assignment", "BatchProblem", "HeavyRule", "Verdict", "from_workload", "verify"]
