"""Architecture: the package's rooms import only downwards and no module imports itself back.

Every import counts: at module level, inside a function (loaded lazily, e.g. numba's kernels on first use) and
under ``TYPE_CHECKING``; a lazy import changes when a module loads, not what it depends on.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "quasched"

#: room -> rooms it may import at module level (besides itself); the service's sub-packages are rooms of their own
LOWER = {"extras", "params", "model", "metrics", "policies", "sim", "traces", "optimize"}
SERVICE = {"service.domain", "service.rules", "service.loop", "service.store", "service.executor", "service.runtime",
           "service.api"}
ALLOWED = {
    "extras": set(),
    "params": set(),
    "model": {"extras", "params"},
    "metrics": {"extras", "params", "model"},
    "traces": {"extras", "params", "model"},
    "policies": {"extras", "params", "model", "metrics"},
    "optimize": {"extras", "params", "model", "traces"},
    "sim": {"extras", "params", "model", "metrics", "policies", "traces"},
    "compat": {"extras", "params", "model", "metrics", "policies", "sim"},
    "report": {"extras", "params", "model", "metrics", "policies", "sim"},
    "learn": {"extras", "params", "model", "metrics", "policies", "sim", "traces"},
    # the service, bottom up: its vocabulary; the rules it decides by; the loop; the store and the executor beside
    # it, neither knowing the loop; the running service composing them; its HTTP API on top
    "service": LOWER,
    "service.domain": LOWER,
    "service.rules": LOWER | {"service.domain"},
    "service.loop": LOWER | {"service.domain", "service.rules"},
    "service.store": LOWER | {"service.domain"},
    "service.executor": LOWER | {"service.domain"},
    "service.runtime": LOWER | SERVICE - {"service.api"},
    "service.api": LOWER | SERVICE,
    "federation": LOWER,
    "signals": {"extras", "params", "model", "traces"},
    "kube": LOWER | SERVICE,
    "front": LOWER | SERVICE | {"federation", "signals", "kube"},  # kube: a Kubernetes member's pods
    "cli": LOWER | {"report", "compat"} | SERVICE | {"kube", "federation", "front", "signals"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, module: str | None = None) -> set[str]:
    """``quasched.*`` modules (and ``module.name``, which may be a module) imported anywhere in ``path``; an
    ``importlib.import_module("quasched....")`` with a literal name counts too."""
    found: set[str] = set()
    module = module or module_name(path)
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]
                            if node.level else [node.module or ""])
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return {n for n in found if n.split(".")[0] == "quasched"}


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "service":
        return f"service.{parts[2]}"
    return parts[1] if len(parts) > 1 else "cli"


GRAPH = {module_name(p): imports(p) for p in ROOT.rglob("*.py")}
MODULES = set(GRAPH)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_rooms_import_only_downwards(module):
    here = room(module)
    bad = {m for m in GRAPH[module] if room(m) not in ALLOWED.get(here, set()) | {here, "cli"} - {"cli"} | {here}}
    assert not bad, f"{module} ({here}) imports {sorted(bad)}; allowed rooms: {sorted(ALLOWED[here])}"


def test_no_import_cycles():
    modules = set(GRAPH)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = {m: {r for r in map(resolve, GRAPH[m]) if r and r != m and not m.startswith(r + ".")}
             for m in modules}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in edges[m]:
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(n):] + [n]) if n in path
                                     else f"import cycle through {m} -> {n}")
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])


def test_imports_sees_lazy_relative_and_type_checking_imports(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from typing import TYPE_CHECKING\nimport numpy\nif TYPE_CHECKING:\n"
                      "    from quasched.model.fit import Demand\n\ndef f():\n    import quasched.kube.sync\n"
                      "    from .nodes import NodeSpec\n"
                      "    return importlib.import_module('quasched.metrics.frag_kernel')\n")
    assert imports(source, "quasched.model.probe") == {"quasched.model.fit", "quasched.model.fit.Demand", "quasched.kube.sync",
                     "quasched.model.nodes", "quasched.model.nodes.NodeSpec", "quasched.metrics.frag_kernel"}


def test_every_module_is_in_a_listed_room():
    """A new room (or a module left at the service's top beside its rooms) must be placed in :data:`ALLOWED`."""
    assert {room(m) for m in MODULES} <= set(ALLOWED), sorted({room(m) for m in MODULES} - set(ALLOWED))


def test_test_folders_mirror_the_package_and_names_are_unique():
    """Each test folder is a room of the package (or the suite's root), and no two test modules share a name (the
    folders are importable by module name: tests/conftest.py)."""
    tests = ROOT.parent / "tests"
    modules = sorted(tests.rglob("test_*.py"))
    assert len({p.name for p in modules}) == len(modules)
    folders = {p.parent.relative_to(tests) for p in modules} - {Path(".")}
    assert all((ROOT / folder).is_dir() for folder in folders), sorted(f for f in folders if not (ROOT / f).is_dir())
