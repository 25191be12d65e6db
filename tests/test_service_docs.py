"""docs/service.md names the API's fields as they are: every JSON shape it spells out equals its schema's fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from quasched.service import schemas as s

DOC = (Path(__file__).resolve().parents[1] / "docs" / "service.md").read_text()

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
