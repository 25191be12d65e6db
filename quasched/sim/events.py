"""The timeline of a time-based replay (:mod:`quasched.sim.replay`).

:func:`build_timeline` turns a workload's creation/deletion columns into
arrival and departure times (skipping rows without a creation time, giving
rows without a deletion time the end of the trace).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from quasched.model.workload import Workload

MissingCreation = Literal["skip", "start"]


@dataclass(frozen=True)
class Timeline:
    """When each workload row arrives and when its trace says it leaves.

    ``arrival``/``deletion`` are per row (NaN for skipped rows); ``order``
    lists the replayed rows by arrival time, ties in file order.
    """

    arrival: np.ndarray
    deletion: np.ndarray
    order: np.ndarray
    skipped: np.ndarray
    start: float
    end: float

    @property
    def n_skipped(self) -> int:
        return int(self.skipped.sum())


def build_timeline(workload: Workload, missing_creation: MissingCreation = "skip") -> Timeline:
    """Arrival and departure times of every row of ``workload``.

    - The trace ends at ``end``, the latest finite creation or deletion time
      of any row (skipped rows included), and starts at
      ``start = min(0, earliest finite time)``.
    - A row without a creation time is skipped (``missing_creation="skip"``,
      the default) or arrives at ``start`` (``"start"``: it was already running
      when the trace began).
    - A row without a deletion time leaves at ``end``; a deletion time before
      the creation time is raised to the creation time (zero lifetime).
    """
    creation = np.asarray(workload.creation_time, dtype=float)
    deletion = np.asarray(workload.deletion_time, dtype=float)
    finite = np.concatenate([creation[np.isfinite(creation)], deletion[np.isfinite(deletion)]])
    end = float(finite.max()) if len(finite) else 0.0
    start = min(0.0, float(finite.min())) if len(finite) else 0.0
    missing = ~np.isfinite(creation)
    if missing_creation == "skip":
        skipped = missing
        arrival = np.where(missing, np.nan, creation)
    elif missing_creation == "start":
        skipped = np.zeros(len(creation), dtype=bool)
        arrival = np.where(missing, start, creation)
    else:
        raise ValueError(f"unknown missing_creation {missing_creation!r}; use 'skip' or 'start'")
    leave = np.where(np.isfinite(deletion), deletion, end)
    leave = np.where(skipped, np.nan, np.maximum(leave, arrival))
    rows = np.flatnonzero(~skipped)
    order = rows[np.argsort(arrival[rows], kind="stable")]
    return Timeline(arrival, leave, order, skipped, start, end)
