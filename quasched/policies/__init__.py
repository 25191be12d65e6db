"""Placement policies: score plugins (one module each) composed into profiles by the registry.

Exports load on first use, so reading the registry (``quasched --help``) does not import NumPy.
"""

from importlib import import_module

_EXPORTS = {
    "CycleState": "base", "ScorePlugin": "base",
    "Decision": "framework", "Policy": "framework", "Scheduler": "framework",
    "PAPER_POLICIES": "registry", "REGISTRY": "registry", "PolicySpec": "registry", "make_policy": "registry",
    "parse_spec": "registry", "parse_specs": "registry", "policy_names": "registry",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'quasched.policies' has no attribute {name!r}")
    return getattr(import_module(f"quasched.policies.{_EXPORTS[name]}"), name)
