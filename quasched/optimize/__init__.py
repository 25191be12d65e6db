"""Batch optimisation: Qua's job-assignment problem, solved by greedy, MILP, QUBO and QAOA, always verified.

The names below are imported on first use, so ``quasched.cli.batch`` loads without NumPy. No
exported name is also a submodule's name: importing that submodule would shadow the export.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "Assignment": "quasched.optimize.assignment",
    "BatchProblem": "quasched.optimize.problem",
    "HeavyRule": "quasched.optimize.problem",
    "from_workload": "quasched.optimize.problem",
    "Verdict": "quasched.optimize.verifier",
    "verify": "quasched.optimize.verifier",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
