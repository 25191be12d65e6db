"""docs/service.md names the API's fields as they are: every JSON shape it spells out equals its schema's fields; every
module docs/ and README name (a path such as ``quasched/kube/sync.py``, a file of the package a section covers, or a
dotted ``quasched.x.y``) is in the tree."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from quasched.service.runtime import schemas as s

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "service.md").read_text()
DOCS = sorted([*REPO.glob("docs/*.md"), REPO / "README.md"])

#: table rows (method and path as the doc writes them) -> (body model, reply model); None: not spelled out there
ROUTES = {
    "POST /jobs": (s.JobSubmit, None),
    "POST /jobs/{id}/complete": (s.JobComplete, None),
    "GET /queues": (None, s.QueueOut),
    "PUT /queues/{name}": (s.QueuePut, None),
    "POST /nodes": (s.NodeIn, None),
    "PATCH /nodes/{name}": (s.NodePatch, None),
    "PUT /nodes/{name}/devices/{d}": (s.DeviceHealth, None),
    "GET /snapshot": (None, s.SnapshotOut),
    "GET /timeseries": (None, s.SampleOut),
    "GET /whoami": (None, s.WhoAmI),
}
#: prose shapes ("Job JSON: `{...}`") -> model; nested shapes checked through the parent
PROSE = {"Job": s.JobOut, "Node": s.NodeOut, "Event": s.EventOut}
NESTED = {"placement": s.PlacementOut, "reason": s.ReasonOut}


def split_top(shape: str) -> dict[str, str]:
    """``{a, b: [..], c (unit)?}`` -> ``{"a": "", "b": "[..]", "c": ""}``: keys at depth 0 (``?`` and notes dropped)."""
    body = shape.strip()[1:-1]
    parts, depth, token = [], 0, ""
    for ch in body:
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            parts.append(token)
            token = ""
        else:
            token += ch
    parts.append(token)
    out = {}
    for part in (p.strip() for p in parts if p.strip()):
        key, _, rest = re.sub(r"\s*\([^)]*\)", "", part).partition(":")
        out[key.strip().rstrip("?")] = rest.strip()
    return out


def row(route: str) -> list[str]:
    method, path = route.split(" ", 1)
    line = next(x for x in DOC.splitlines() if x.startswith(f"| `{method} {path}`"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


@pytest.mark.parametrize("route", ROUTES)
def test_table_shapes_name_the_schema_fields(route):
    body, reply = ROUTES[route]
    cells = row(route)
    if body is not None:
        shape = re.match(r"`(\[?\{.*?\}\]?)`", cells[2]).group(1).strip("[]")
        assert set(split_top(shape)) == fields(body)
    if reply is not None:
        shape = re.search(r"`(\[?\{.*?\}\]?)`", cells[3]).group(1).strip("[]")
        assert set(split_top(shape)) == fields(reply)


@pytest.mark.parametrize("name", PROSE)
def test_prose_shapes_name_the_schema_fields(name):
    shape = re.search(rf"{name} JSON: `(\{{.*?\}})`", DOC, re.S).group(1).replace("\n", " ")
    keys = split_top(shape)
    assert set(keys) == fields(PROSE[name])
    for key, model in NESTED.items():
        if key in keys:
            assert set(split_top(re.search(r"\{.*\}", keys[key]).group(0))) == fields(model)


def test_split_top_hand_computed():
    assert split_top("{a, b: [{x, y}], c (cores), d?, e: {p, q} | null}") == {
        "a": "", "b": "[{x, y}]", "c": "", "d": "", "e": "{p, q} | null"}


#: a file name as docs write one (``sync.py``, ``traces/carbon.py``); not a user's script (``python train.py``)
PY_NAME = re.compile(r"(?<![\w/.-])(?<!python )([\w/.-]*\w\.py)\b")
#: a heading about one package, e.g. "## Modules (`quasched/service/`)": its bare file names are in that package
SECTION = re.compile(r"^#+ .*\(`(quasched/[\w/]+?)/?`\)")
DOTTED = re.compile(r"(?<![\w.])quasched((?:\.\w+)+)")
SOURCES = {p.relative_to(REPO).as_posix() for top in ("quasched", "tests", "benchmarks", "deploy", "examples")
           for p in (REPO / top).rglob("*.py")}
ROOMS = {p.stem for p in (REPO / "quasched").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


def missing_files(text: str, sources: set[str]) -> list[str]:
    """The ``.py`` names in ``text`` that are not in ``sources``: in a package's section, under that package (or under
    ``quasched/``); elsewhere, as a path or the end of one."""
    package, missing = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            heading = SECTION.match(line)
            package = heading.group(1) if heading else None
        for name in PY_NAME.findall(line):
            found = any(path in sources for path in (name, f"quasched/{name}", f"{package}/{name}"))
            if package is None:
                found = found or any(s.endswith("/" + name) for s in sources)
            if not found:
                missing.append(f"{package}/{name}" if package else name)
    return missing


def resolves(dotted: str) -> bool:
    """Whether ``quasched.a.b.c`` is a module, or an attribute of the longest module it starts with."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if err.name is not None and err.name.split(".")[0] != "quasched":
                return True  # in the tree, needing an extra that is not installed: its names go unchecked
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_missing_files_hand_computed():
    sources = {"quasched/service/store.py", "quasched/traces/carbon.py", "benchmarks/speed.py"}
    text = ("See `store.py` and benchmarks/speed.py; run python train.py.\n"
            "## Modules (`quasched/service/`)\n| `store.py`, `stream.py` | |\n| `traces/carbon.py` | |\n"
            "## Other\n`carbon.py`, `gone.py`\n")
    assert missing_files(text, sources) == ["quasched/service/stream.py", "gone.py"]


def test_resolves_hand_computed():
    assert resolves("quasched.model.fit.fit_checks") and resolves("quasched.service")
    assert not resolves("quasched.service.stream") and not resolves("quasched.model.fit.no_such_name")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_module_a_doc_names_is_in_the_tree(doc):
    text = doc.read_text()
    assert missing_files(text, SOURCES) == []
    dotted = sorted({"quasched" + d for d in DOTTED.findall(text) if d.split(".")[1] in ROOMS})
    assert [d for d in dotted if not resolves(d)] == []
