"""The extras in tests: a test of a use beyond the core skips, naming the ``pip install`` that adds what it needs,
when that is missing; :data:`HIDE` makes a Python process behave as the core install (its ``sitecustomize``)."""

from __future__ import annotations

from importlib.util import find_spec
from types import ModuleType

import pytest

from quasched.extras import EXTRAS

#: top-level packages of the extras (quasched/extras.py) and of the test tools of ``quasched[dev]``
OPTIONAL = ("cma", "gymnasium", "psycopg", "kubernetes", "urllib3", "grpc", "google.protobuf", "dimod", "dwave",
            "qiskit", "qiskit_aer", "ray", "pynvml", "playwright", "schemathesis", "pyinstrument")
#: a ``sitecustomize.py`` under which importing any of :data:`OPTIONAL` raises ModuleNotFoundError
HIDE = f"""
import sys
from importlib.abc import MetaPathFinder

class Hide(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in {OPTIONAL!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hide())
"""


def _reason(module: str, extra: str) -> str:
    what = EXTRAS.get(extra, "this test")  # "dev" holds the test tools (browser, fuzzing), not an extra of a use
    return f"{what} needs {module.split('.')[0]!r}: pip install 'quasched[{extra}]'"


def needs(module: str, extra: str) -> ModuleType:
    """Import ``module``, else skip the test (or, at module level, the module) naming ``quasched[extra]``."""
    __tracebackhide__ = True  # a skip is reported at the caller's line
    return pytest.importorskip(module, reason=_reason(module, extra))


def requires(module: str, extra: str) -> pytest.MarkDecorator:
    """A mark skipping a test (or a parameter) when ``module`` of ``quasched[extra]`` is not installed."""
    try:
        missing = find_spec(module) is None
    except ImportError:  # its parent package is missing
        missing = True
    return pytest.mark.skipif(missing, reason=_reason(module, extra))
