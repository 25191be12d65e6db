"""A results store for sweeps: one SQLite file, one row per finished run.

A run is keyed by everything that determines its result: the trace name and a
digest of its loaded inputs (nodes and pods), the policy spec, the seed, the
engine configuration (tune ratio, random stream, typical-pod threshold, curve
binning) and a digest of the simulator's source code. A sweep asks the store
which keys are done and runs only the others, so a rerun skips finished runs
and an interrupted sweep resumes; editing the simulator (or the inputs) changes
the key, so stale results are never reused.

Why SQLite: the standard library has it, a whole matrix lives in one file, and
each run is committed in its own transaction, so killing a sweep loses at most
the runs in flight. Only the parent process writes. Summaries are stored as
JSON (floats round-trip exactly; NaN marks empty curve bins).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sqlite3
from collections import Counter
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np

from quasched.metrics.curves import Curves
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.sim.arrival import ExperimentConfig
from quasched.sim.sweep import RunSummary

#: rooms whose code decides a run's result (the code digest covers them)
CODE_ROOMS = ("model", "metrics", "policies", "sim", "traces", "compat")
_SCHEMA = """CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY, trace TEXT, inputs TEXT, policy TEXT, seed INTEGER, config TEXT, code TEXT,
    events INTEGER, placed INTEGER, final_alloc_pct REAL, elapsed_s REAL, summary TEXT)"""


@lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 (16 hex digits) of the simulator's source files (:data:`CODE_ROOMS`)."""
    root = Path(__file__).parents[1]
    h = hashlib.sha256()
    for path in sorted(p for room in CODE_ROOMS for p in (root / room).rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def inputs_digest(nodes: NodeSpec, workload: Workload) -> str:
    """SHA-256 (16 hex digits) of loaded inputs (their pickled arrays)."""
    return hashlib.sha256(pickle.dumps((nodes, workload), protocol=5)).hexdigest()[:16]


@dataclass(frozen=True)
class RunKey:
    """Everything that determines one run's result."""

    trace: str
    inputs: str
    policy: str
    seed: int
    config: str
    code: str

    @classmethod
    def of(cls, trace: str, inputs: str, config: ExperimentConfig, curves: str) -> RunKey:
        """The key of ``config``'s run on ``trace``; ``curves`` names the binning function."""
        engine = {"tune_ratio": config.tune_ratio, "rng": config.rng,
                  "typical_threshold": config.typical_threshold, "curves": curves}
        return cls(trace, inputs, config.policy, config.seed, json.dumps(engine, sort_keys=True), code_digest())

    @property
    def id(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def summary_to_json(run: RunSummary) -> str:
    """A :class:`RunSummary` (without its optional per-event log) as JSON."""
    return json.dumps({
        "policy": run.policy, "seed": run.seed, "events": run.events, "placed": run.placed,
        "curves": {f.name: getattr(run.curves, f.name).tolist() for f in fields(Curves)},
        "failed_shapes": dict(run.failed_shapes), "final_alloc_pct": run.final_alloc_pct,
        "final_frag_ratio": run.final_frag_ratio, "elapsed_s": run.elapsed_s, "end_state": run.end_state,
    })


def summary_from_json(text: str) -> RunSummary:
    """A :class:`RunSummary` back from its stored JSON."""
    data = json.loads(text)
    curves = Curves(**{name: np.asarray(values, dtype=float) for name, values in data.pop("curves").items()})
    return RunSummary(curves=curves, failed_shapes=Counter(data.pop("failed_shapes")), **data)


class ResultStore:
    """Finished runs in one SQLite file (module docstring); a context manager."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path)
        self._db.execute(_SCHEMA)
        self._db.commit()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the SQLite file."""
        self._db.close()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def done(self, keys: Iterable[RunKey]) -> set[RunKey]:
        """Those of ``keys`` whose run is stored."""
        by_id = {key.id: key for key in keys}
        stored = {row[0] for row in self._db.execute("SELECT key FROM runs")}
        return {key for kid, key in by_id.items() if kid in stored}

    def put(self, key: RunKey, run: RunSummary) -> None:
        """Store one finished run (committed at once; a rerun of the same key replaces it)."""
        self._db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key.id, key.trace, key.inputs, key.policy, key.seed, key.config, key.code, run.events, run.placed,
             run.final_alloc_pct, run.elapsed_s, summary_to_json(run)),
        )
        self._db.commit()

    def get(self, key: RunKey) -> RunSummary | None:
        """The stored summary of ``key``'s run (None if it has not run)."""
        row = self._db.execute("SELECT summary FROM runs WHERE key = ?", (key.id,)).fetchone()
        return None if row is None else summary_from_json(row[0])
