"""Architecture: the package's rooms import only downwards and no module imports itself back.

Module-level imports only: an import inside a function (loaded lazily, e.g. the
Go RNG for ``rng="go"``) or under ``TYPE_CHECKING`` does not create a load-time
dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "quasched"

#: room -> rooms it may import at module level (besides itself)
ALLOWED = {
    "model": set(),
    "metrics": {"model"},
    "traces": {"model"},
    "policies": {"model", "metrics"},
    "optimize": {"model", "traces"},
    "sim": {"model", "metrics", "policies", "traces"},
    "compat": {"model", "metrics", "policies", "sim"},
    "report": {"model", "metrics", "policies", "sim"},
    "learn": {"model", "metrics", "policies", "sim", "traces"},
    "service": {"model", "metrics", "policies", "sim", "traces", "optimize"},
    "federation": {"model", "metrics", "policies", "sim", "traces", "optimize"},
    "kube": {"model", "metrics", "policies", "sim", "traces", "optimize", "service"},
    "cli": {"model", "metrics", "policies", "sim", "traces", "optimize", "report", "compat", "service", "kube", "federation"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """``quasched.*`` modules imported at module level (not in functions or TYPE_CHECKING blocks)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in [node] if isinstance(node, (ast.Import, ast.ImportFrom)) else []:
            names = [a.name for a in sub.names] if isinstance(sub, ast.Import) else [sub.module or ""]
            found |= {n for n in names if n.startswith("quasched")}
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "cli"


GRAPH = {module_name(p): top_level_imports(p) for p in ROOT.rglob("*.py")}


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
