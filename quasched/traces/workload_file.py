"""A workload written by hand: one pod per CSV row or JSON Lines line (docs/file-formats.md).

Every column is described once in :data:`COLUMNS` (name, parser, default);
CSV cells and JSON values both become text cells of a :class:`Table`, so
both formats share the parsers and report problems by file, line and field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from quasched.model.resources import RDMA_CAPACITY, RESOURCES, ResourceRegistry
from quasched.model.workload import FULL_GPU_MILLI, NO_LIMIT, Workload
from quasched.traces.errors import TraceError, require_file
from quasched.traces.table import Table, read_table
from quasched.traces.units import parse_cpu, parse_gpu, parse_memory

CSV_SUFFIXES = (".csv",)
JSON_SUFFIXES = (".jsonl", ".json")


@dataclass(frozen=True)
class Column:
    """One column: ``parse(table, name, default)`` reads it; ``default`` fills empty
    cells and absent columns (``None``: required)."""

    name: str
    parse: Callable[[Table, str, Any], np.ndarray]
    default: Any = None


def _number(integer: bool, minimum: float | None = 0, maximum: float | None = None) -> Callable:
    return lambda table, column, default: table.number(
        column, integer=integer, minimum=minimum, maximum=maximum, empty=default)


def _units(parse: Callable[[str], float]) -> Callable:
    return lambda table, column, default: table.convert(column, parse, empty=default)


def _text(table: Table, column: str, default: str) -> np.ndarray:
    return table.text(column)


COLUMNS = (
    Column("name", lambda table, column, default: table.names(column)),
    Column("cpu", _units(parse_cpu)),
    Column("memory", _units(parse_memory)),
    Column("gpu", _units(parse_gpu), 0.0),
    Column("gpu_model", lambda table, column, default: table.gpu_models(column), ""),
    Column("creation_time", _number(False), np.nan),
    Column("deletion_time", _number(False), np.nan),
    Column("duration", _number(False), np.nan),
    Column("team", _text, ""),
    Column("user", _text, ""),
    Column("app", _text, ""),
    Column("max_per_node", _number(True, minimum=NO_LIMIT), NO_LIMIT),
    Column("priority", _number(True, minimum=None), 0),
    Column("rdma", _number(True, maximum=RDMA_CAPACITY), 0),
    Column("disk", _units(parse_memory), 0),
)
REQUIRED = tuple(c.name for c in COLUMNS if c.default is None)
OPTIONAL = tuple(c.name for c in COLUMNS if c.default is not None)


def extra_columns(resources: ResourceRegistry) -> tuple[Column, ...]:
    """An optional integer request column (default 0) per resource of ``resources`` registered
    beyond the built-in ones (:data:`RESOURCES`) whose request is not fixed per pod."""
    return tuple(Column(r.name, _number(True), 0) for r in resources
                 if r.name not in RESOURCES.names and r.per_pod is None)


def load_workload_file(path: str | Path, resources: ResourceRegistry = RESOURCES) -> Workload:
    """Read a workload file: ``.csv``, or JSON Lines (``.jsonl``/``.json``); see docs/file-formats.md.

    Every resource of ``resources`` registered beyond the built-in ones is an
    optional integer column (empty or absent = 0); the requests of those
    columns present go into ``Workload.extra``.
    """
    path = Path(path)
    require_file(path)
    suffix = path.suffix.lower()
    extras = extra_columns(resources)
    clash = [c.name for c in extras if c.name in (*REQUIRED, *OPTIONAL)]
    if clash:
        raise ValueError(f"resources {clash} are named like workload columns; rename them")
    if suffix in CSV_SUFFIXES:
        table = read_table(path, REQUIRED, (*OPTIONAL, *(c.name for c in extras)), strict=True)
    elif suffix in JSON_SUFFIXES:
        table = _read_json_lines(path, [c.name for c in (*COLUMNS, *extras)])
    else:
        raise TraceError(path, f"unknown workload file type {suffix!r}; name it .csv, .jsonl or .json")
    n = len(table.text("name"))
    cells = {
        c.name: c.parse(table, c.name, c.default) if table.has(c.name)
        else np.full(n, c.default, dtype=object if isinstance(c.default, str) else None)
        for c in (*COLUMNS, *extras)
    }
    gpu, spec = cells["gpu"], cells["gpu_model"]
    table.flag("gpu_model", (gpu == 0) & (spec != ""),
               "{value} is set but the pod asks for no GPU; remove it or set gpu")
    creation, deletion, duration = cells["creation_time"], cells["deletion_time"], cells["duration"]
    has_duration = ~np.isnan(duration)
    table.flag("duration", has_duration & ~np.isnan(deletion),
               "{value} given as well as deletion_time; give only one of them")
    table.flag("duration", has_duration & np.isnan(creation),
               "{value} needs creation_time (the pod ends at creation_time + duration); add it or use deletion_time")
    table.not_before("deletion_time", deletion, "creation_time", creation)
    deletion = np.where(has_duration, creation + duration, deletion)
    app, max_per_node = cells["app"], cells["max_per_node"]
    table.flag("max_per_node", max_per_node == 0, "0 is not allowed (use -1 for no limit)")
    table.flag("max_per_node", (max_per_node != NO_LIMIT) & (app == ""),
               "{value} needs an app (the limit counts pods of the same app on a node); set app or remove it")
    table.check()
    app_id, app_names = pd.factorize(
        np.where(app == "", None, app),  # type: ignore[call-overload]  # NumPy's stubs reject None, which np.where takes as an object scalar
        sort=True)
    return Workload(
        name=cells["name"],
        cpu_milli=cells["cpu"].astype(np.int64),
        memory_mib=cells["memory"].astype(np.int64),
        num_gpu=np.where(gpu >= 1, gpu, gpu > 0).astype(np.int64),
        gpu_milli=np.where(gpu >= 1, FULL_GPU_MILLI, np.rint(gpu * FULL_GPU_MILLI)).astype(np.int64),
        gpu_model=spec.astype(object),
        app=app_id.astype(np.int64),
        max_per_node=max_per_node.astype(np.int64),
        rdma=cells["rdma"].astype(np.int64),
        disk_mib=cells["disk"].astype(np.int64),
        creation_time=creation.astype(float),
        deletion_time=deletion.astype(float),
        team=cells["team"].astype(object),
        user=cells["user"].astype(object),
        priority=cells["priority"].astype(np.int64),
        app_names=tuple(app_names.tolist()),
        extra={c.name: cells[c.name].astype(np.int64) for c in extras if table.has(c.name)},
        source=path.name,
    )


def _read_json_lines(path: Path, known: list[str]) -> Table:
    """One JSON object per non-blank line with keys among ``known``, values as text cells ("" for null or absent)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError) as exc:
        raise TraceError(path, f"cannot read the file: {exc}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            pod = json.loads(line, object_pairs_hook=lambda pairs: _unique_keys(path, number, pairs))
        except json.JSONDecodeError as exc:
            raise TraceError(path, f"invalid JSON ({exc.msg}, column {exc.colno}); write one JSON object "
                                   "per line, e.g. {\"name\": \"p1\", \"cpu\": 4, \"memory\": \"16Gi\"}",
                             number) from None
        if not isinstance(pod, dict):
            raise TraceError(path, "not a JSON object; write one {...} object per line", number)
        for key, value in pod.items():
            if key not in known:
                raise TraceError(path, f"unknown key; rename or remove it (known keys: {', '.join(known)})",
                                 number, key)
            if isinstance(value, (list, dict)):
                raise TraceError(path, f"{json.dumps(value)} is not allowed; write a string or a number",
                                 number, key)
        records.append((number, {k: _cell(v) for k, v in pod.items()}))
    if not records:
        raise TraceError(path, "the file holds no pods; write one JSON object per line")
    return Table.from_records(path, records, known)


def _unique_keys(path: Path, line: int, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise TraceError(path, "duplicate key; give each key once per line", line, key)
    return dict(pairs)


def _cell(value: Any) -> str:
    """A JSON value as the text a CSV cell would hold."""
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else json.dumps(value)
