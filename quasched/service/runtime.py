"""The running service behind the HTTP API: one :class:`Service` holds the
:class:`~.store.Store`, the :class:`~.controller.Controller` and one lock. Every mutation runs,
under the lock: change → scheduling cycle → ``store.save(*ctl.drain_changes())``; the events are
then published to the live stream. A background thread fires the controller's timers
(completions by duration, grace-period ends) at :meth:`Controller.next_timer` or every half
second. Also here: the built-in cluster, the first admin token and its file."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from fastapi import HTTPException, status

from quasched.model.nodes import NodeSpec
from quasched.service.auth import masked
from quasched.service.controller import Controller, records_of
from quasched.service.executor import Executor
from quasched.service.localnode import HealthWatch, local_gpus, this_node
from quasched.service.domain import Event, Job, NodeRecord, QueueSpec
from quasched.service.loop_state import LoopOptions
from quasched.service.metrics import ServiceMetrics
from quasched.service.schemas import JobOut, NodeOut
from quasched.service.broker import Broker

#: longest wait of the timer thread between ticks
TICK_S = 0.5
#: the queue created on a fresh database, so a new service accepts jobs at once
DEFAULT_QUEUE = "default"

T = TypeVar("T")


def default_cluster() -> NodeSpec:
    """The built-in cluster: the simulator's synthetic default (120 openb-like GPU nodes)."""
    from quasched.traces.synthetic import synthetic_cluster

    return synthetic_cluster()


def write_token_file(path: Path, secret: str) -> None:
    """Write ``secret`` to ``path``, readable by its owner only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    os.chmod(path, 0o600)


class Service:
    """Store + controller + one lock, and the timer thread (module docstring)."""

    def __init__(self, store: Any, cluster: NodeSpec | None, options: LoopOptions,
                 clock: Callable[[], float] = time.time, token_file: Path | None = None,
                 state_dir: Path = Path("quasched-state")) -> None:
        self.store = store
        self.clock = clock
        self.options = options
        self.state_dir = state_dir
        self.executor: Executor | None = None
        self.lock = threading.RLock()
        self.metrics = ServiceMetrics()
        self.broker = Broker()
        self.token_file = token_file
        self.new_admin_token: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._teams: dict[int, str] = {}
        with self.lock:
            self.records, self.ctl = self._restore(cluster)
            self._ensure_admin_token()
            if self.options.local_node is not None:
                record = self.records[self.options.local_node]
                self.executor = Executor(record.name, state_dir, self.mutate, local_gpus(record))
                self.health = HealthWatch(lambda device, ok: self.set_device_health(record.name, device, ok))

    # ------------------------------------------------------------ start
    def _restore(self, cluster: NodeSpec | None) -> tuple[dict[str, NodeRecord], Controller]:
        """Controller rebuilt from the store; on a fresh store register ``cluster`` and a default queue."""
        records, queues, jobs = self.store.load()
        if not records:
            records = records_of(cluster if cluster is not None else default_cluster())
            for record in records:
                self.store.put_node(record)
        if not queues:
            queues = [QueueSpec(DEFAULT_QUEUE)]
            self.store.put_queue(queues[0])
        if self.options.local_node is not None:
            self.options = replace(self.options, local_node=this_node([r.name for r in records],
                                                                     self.options.local_node))
        ctl = Controller.rebuilt(records, queues, jobs, self.options)
        self._teams.update((job.id, job.spec.team) for job in jobs)
        now = self.clock()
        ctl.cycle(now)
        self._persist(ctl)
        return {r.name: r for r in records}, ctl

    def _ensure_admin_token(self) -> None:
        """Create the first admin token, print it and write it to the token file, unless one exists."""
        if self.store.has_admin_token():
            return
        secret = self.store.add_token("admin", None, True)
        self.new_admin_token = secret
        where = ""
        if self.token_file is not None:
            write_token_file(self.token_file, secret)
            where = f" (written to {self.token_file})"
        shown = secret if self.token_file is None else masked(secret)  # with no file, this is the only copy
        print(f"quasched: created admin token {shown}{where}", file=sys.stderr)

    def lookup_token(self, secret: str) -> Any:
        """Who holds the API token ``secret`` (None if unknown, revoked or expired)."""
        return self.store.token(secret, now=self.clock())

    # ------------------------------------------------------------ timer thread
    def start(self) -> None:
        """Re-attach to the jobs running here and start the executor, then the timer thread (completions by
        duration, grace periods), if they are not running."""
        if self.executor is not None and self._thread is None:
            with self.lock:
                self.executor.recover(list(self.ctl.jobs.values()))
            self.executor.start()
            self.health.start()
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run_timers, name="quasched-timers", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the timer thread and the executor (the jobs' processes run on) and close the live streams."""
        if self.executor is not None:
            self.health.stop()
            self.executor.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.broker.close()

    def _run_timers(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.tick()
            except Exception as err:  # keep the loop alive; the next tick retries
                print(f"quasched: timer tick failed: {err!r}", file=sys.stderr)
                wait = TICK_S
            self._stop.wait(wait)

    def tick(self) -> float:
        """Fire due timers and run a cycle; seconds until the next timer (at most :data:`TICK_S`)."""
        with self.lock:
            now = self.clock()
            events = self._cycle(now)
            nxt = self.ctl.next_timer()
        self.broker.publish(list(events))
        return TICK_S if nxt is None else min(TICK_S, max(0.001, nxt - now))

    # ------------------------------------------------------------ mutations
    def _persist(self, ctl: Controller) -> list[Event]:
        jobs, events = ctl.drain_changes()
        if jobs or events:
            try:
                self.store.save(jobs, events)
            except Exception as err:  # memory ran ahead of the database: forget it, rebuild from what is stored
                records, queues, unfinished = self.store.load()
                self.ctl = Controller.rebuilt(records, queues, unfinished, self.options)
                raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                    f"the database refused the change, nothing was applied: {err}") from err
            if self.executor is not None:
                self.executor.sync(jobs)
            self._teams.update((job.id, job.spec.team) for job in jobs)
            self.metrics.count(events, self._teams)
            for job in jobs:
                if job.state.finished:
                    self._teams.pop(job.id, None)
        return events

    def mutate(self, change: Callable[[Controller, float], T]) -> T:
        """Under the lock: ``change(ctl, now)``, a scheduling cycle, persist; then publish the events."""
        with self.lock:
            now = self.clock()
            result = change(self.ctl, now)
            events = self._cycle(now)
        self.broker.publish(list(events))
        return result

    def set_device_health(self, name: str, device: int, healthy: bool) -> None:
        """Mark GPU ``device`` of node ``name`` healthy or failed, in the loop and the store (a mutation)."""
        def change(ctl: Controller, now: float) -> None:
            record = self.records[name]
            ctl.set_device_health(name, device, healthy, now)
            unhealthy = set(record.unhealthy) - {device} | (set() if healthy else {device})
            self.records[name] = updated = replace(record, unhealthy=tuple(sorted(unhealthy)))
            self.store.put_node(updated)

        self.mutate(change)

    def _cycle(self, now: float) -> list[Event]:
        """A timed scheduling cycle and its persisted changes (caller holds the lock)."""
        start = time.perf_counter()
        self.ctl.cycle(now)
        self.metrics.decision.observe(time.perf_counter() - start)
        return self._persist(self.ctl)

    # ------------------------------------------------------------ views
    def job_out(self, job: Job) -> JobOut:
        """The API view of ``job`` (its live state when unfinished, with its queue position)."""
        live = self.ctl.jobs.get(job.id)
        return JobOut.of(live if live is not None else job, self.ctl.position.get(job.id), self.clock())

    def node_out(self, raw: dict[str, Any]) -> NodeOut:
        """The API view of one node of the controller's snapshot."""
        record = self.records.get(raw["name"])
        return NodeOut(num_gpus=len(raw["gpu_used_milli"]), labels=dict(record.labels) if record else {}, **raw)

    def nodes_out(self, names: set[str] | None = None) -> list[NodeOut]:
        """The API view of the nodes named in ``names`` (all when None)."""
        return [self.node_out(n) for n in self.ctl.snapshot()["nodes"] if names is None or n["name"] in names]
