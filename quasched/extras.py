"""Optional dependencies: each use beyond the core (simulator, policies, replay, sweeps, ``serve`` on SQLite)
comes with an extra of the package, and a missing one is a clear error naming the ``pip install`` that adds it."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

#: extra -> (what it is for, the distributions it adds); pyproject.toml's optional-dependencies say the same
EXTRAS = {
    "quantum": "QUBO annealing and QAOA solvers of `quasched batch` (dimod, dwave-samplers, qiskit, qiskit-aer)",
    "postgres": "PostgreSQL as the service's database (psycopg)",
    "kube": "the Kubernetes extender and device plugin (kubernetes, grpcio, protobuf)",
    "gpu": "this machine's GPUs from NVML (nvidia-ml-py)",
    "learn": "training the learned policy (gymnasium, cma)",
    "ray": "`quasched sweep --backend ray` (ray)",
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says which ``pip install`` adds it."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtra` naming the extra ``quasched[extra]`` that installs it."""
    try:
        return import_module(module)
    except ImportError as err:
        raise MissingExtra(f"{EXTRAS[extra]} needs the Python package {module.split('.')[0]!r}, which is not "
                           f"installed ({err}): pip install 'quasched[{extra}]'") from None


def require_or_exit(extra: str, *modules: str) -> None:
    """For scripts: import each of ``modules``, or exit with one line naming the ``pip install`` (no traceback)."""
    try:
        for module in modules:
            require(module, extra)
    except MissingExtra as err:
        raise SystemExit(f"error: {err}") from None
