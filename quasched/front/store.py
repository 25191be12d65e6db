"""The front's store: the service's :class:`~quasched.service.store.database.Store` (jobs, events, tokens) and a
``dispatches`` row per job (where and when it goes, why, its member's id of it, its energy and carbon)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

from sqlalchemy import Table, insert, select, update

from quasched.service.domain import Event, Job
from quasched.service.store.database import DispatchRow, Store

DISPATCHES = cast(Table, DispatchRow.__table__)


@dataclass
class Dispatch:
    """A front job's dispatch (module docstring); times are epoch seconds. ``remote``: the member's name of the job
    (a job id of a serve member); ``baseline_*``: the least loaded member when it arrived, and the carbon its run
    would have cost there had it started at once (what the dashboard's saving is counted against)."""

    job_id: int
    deadline: float
    run_s: float
    member: str = ""
    release_at: float | None = None
    why: str = ""
    remote: str | None = None
    baseline_member: str = ""
    baseline_kg: float | None = None
    sent_at: float | None = None
    kwh: float | None = None
    kg: float | None = None


class FrontStore(Store):
    """:class:`Store` with the front's dispatches."""

    def add_dispatch(self, dispatch: Dispatch) -> None:
        with self.engine.begin() as conn:
            self.fence(conn)
            if conn.execute(select(DISPATCHES.c.job_id).where(DISPATCHES.c.job_id == dispatch.job_id)).first() is None:
                conn.execute(insert(DISPATCHES).values(asdict(dispatch)))

    def save_dispatch(self, dispatch: Dispatch, jobs: tuple[Job, ...] = (), events: tuple[Event, ...] = ()) -> None:
        """Update ``dispatch`` and save ``jobs`` and ``events`` in one transaction."""
        with self.engine.begin() as conn:
            self.fence(conn)
            values = asdict(dispatch)
            conn.execute(update(DISPATCHES).where(DISPATCHES.c.job_id == values.pop("job_id")).values(values))
            self._save(conn, jobs, events)

    def dispatches(self, job_ids: list[int] | None = None) -> dict[int, Dispatch]:
        """The dispatches of ``job_ids`` (None: all), by job id."""
        query = select(DISPATCHES)
        if job_ids is not None:
            query = query.where(DISPATCHES.c.job_id.in_(job_ids))
        with self.engine.connect() as conn:
            return {row.job_id: Dispatch(**row._asdict()) for row in conn.execute(query)}
