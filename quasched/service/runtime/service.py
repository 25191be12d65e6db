"""The running service behind the HTTP API: one :class:`Service` holds the
:class:`~quasched.service.store.database.Store`, the :class:`~quasched.service.loop.controller.Controller` and one lock. Every mutation runs,
under the lock: change → scheduling cycle → one transaction (:meth:`Service._persist`, the one path to the store:
the jobs and events the loop changed with the node records and queues the change wrote, :meth:`Service.keep_node`;
fenced, the server steps down; refused, memory is rebuilt from the store); the events are then published to the
live stream. Submissions queued while a group runs are stored in
one transaction and scheduled in one cycle (:attr:`Service.submit`, :mod:`.combiner`); each is
answered after that commit. A background thread fires the controller's timers (completions by
duration, grace-period ends) at :meth:`Controller.next_timer` or every half second, and every
second ends the live streams whose token stopped working (:meth:`Service.token_works`). With a
local node, the :class:`~quasched.service.executor.commands.Executor` runs the commands of the jobs placed on it (fed the
changed jobs after every persist) and :class:`~quasched.service.executor.localnode.HealthWatch` watches its GPUs. Also
here: the built-in cluster, the first admin token and its file.

Only the leader (:mod:`quasched.service.store.leadership`) schedules and writes; a standby answers reads from a view of
the store rebuilt at most every :data:`VIEW_S`, refuses writes naming the leader, and takes over
(rebuilding its state from the store) when its :class:`~quasched.service.store.leadership.Elector` wins the lease."""

from __future__ import annotations

import gc
import math
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from fastapi import HTTPException, status

from quasched.model.nodes import NodeSpec
from quasched.service.domain import Event, Job, JobSpec, JobState, NodeRecord, QueueSpec
from quasched.service.executor.commands import Executor
from quasched.service.executor.joblog import Caps
from quasched.service.executor.gpustate import GpuReading, Judge, Limits, Sampler
from quasched.service.executor.localnode import HealthWatch, local_gpus, local_nvml, this_node
from quasched.service.executor.runas import RunAs
from quasched.service.loop.controller import Controller, records_of
from quasched.service.loop.state import LoopOptions, SpecError
from quasched.service.runtime.auth import TokenCache, masked
from quasched.service.runtime.broker import Broker
from quasched.service.runtime.combiner import Combiner
from quasched.service.runtime.metrics import ServiceMetrics
from quasched.service.runtime.schemas import GpuLiveOut, JobOut, NodeOut
from quasched.service.store.database import Store, TokenInfo
from quasched.service.store.leadership import Elector, Fenced, Holder, identity

#: longest wait of the timer thread between ticks
TICK_S = 0.5
#: the queue created on a fresh database, so a new service accepts jobs at once
DEFAULT_QUEUE = "default"
#: a standby rebuilds its view of the store for reads at most this often (seconds)
VIEW_S = 1.0
#: seconds between checks that the tokens of the open streams still work (a revoked or expired one's streams end)
RECHECK_S = 1.0

T = TypeVar("T")


def default_cluster() -> NodeSpec:
    """The built-in cluster: the simulator's synthetic default (120 openb-like GPU nodes)."""
    from quasched.traces.synthetic import synthetic_cluster

    return synthetic_cluster()


def warm_up(records: list[NodeRecord], options: LoopOptions) -> None:
    """Place a small GPU job on a throwaway loop of one of ``records``' GPU nodes, so that the first request does
    not pay for loading the policy's compiled kernels (about half a second)."""
    node = next((r for r in records if r.num_gpus), None)
    if node is None:
        return
    ctl = Controller.rebuilt([node], [QueueSpec(DEFAULT_QUEUE)], [], replace(options, local_node=None))
    spec = JobSpec("warm-up", DEFAULT_QUEUE, 1, 1, num_gpu=1, gpu_milli=500,
                   priority_class=next(iter(options.priority_classes)))
    ctl.submit(1, spec, 0.0, validate=False)
    ctl.cycle(0.0)


def write_token_file(path: Path, secret: str) -> None:
    """Write ``secret`` to ``path``, readable by its owner only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    os.chmod(path, 0o600)


class Service:
    """Store + controller + one lock, and the timer thread (module docstring)."""

    def __init__(self, store: Store, cluster: NodeSpec | None, options: LoopOptions,
                 clock: Callable[[], float] = time.time, token_file: Path | None = None,
                 state_dir: Path = Path("quasched-state"), leading: bool = True, run_as: RunAs | None = None,
                 jobs_dir: Path | None = None, gpu_limits: Limits = Limits()) -> None:
        self.store = store
        #: who runs each team's commands (default: nobody), and where jobs get their directories
        self.run_as, self.jobs_dir = run_as if run_as is not None else RunAs(), jobs_dir
        self.cluster = cluster
        #: whether this server holds the lease and schedules (else a standby)
        self.leading = leading
        self.elector: Elector | None = None
        self._viewed = -math.inf
        self._taking_over = False  # between winning the lease and leading
        self.state_dir = state_dir
        self.clock = clock
        self.options = options
        self.executor: Executor | None = None  # runs the commands of jobs on this machine's node, if any
        self.health: HealthWatch | None = None
        self.sampler: Sampler | None = None
        #: node name -> its GPUs' latest readings, and what judges them (:mod:`~quasched.service.executor.gpustate`)
        self.gpu_live: dict[str, list[GpuReading]] = {}
        self.gpu_judges: dict[str, Judge] = {}
        self.gpu_limits = gpu_limits
        self.lock = threading.RLock()
        self.metrics = ServiceMetrics()
        self.broker = Broker()
        self.token_file = token_file
        self.new_admin_token: str | None = None
        self.tokens = TokenCache()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._teams: dict[int, str] = {}
        #: the node records and queues the change under way wrote (:meth:`keep_node`), stored with its jobs and events
        self._nodes: dict[str, NodeRecord | None] = {}
        self._queues: list[QueueSpec] = []
        #: submissions, in groups: one insert transaction and one cycle for every submission waiting
        self.submit: Combiner[JobSpec, tuple[JobOut, bool]] = Combiner(self.lock, self._submit_group)
        with self.lock:
            if leading:
                self._prepare_to_lead()
            else:
                self.records, self._ctl = self._view()
                warm_up(list(self.records.values()), self.options)  # so that a take-over does not pay for it

    @property
    def ctl(self) -> Controller:
        """The scheduling loop (on a standby: a view of the store, refreshed at most every :data:`VIEW_S`)."""
        if self._view_due():
            with self.lock:
                if self._view_due():  # not if a take-over finished while this waited: its loop stays
                    self.records, self._ctl = self._view()
        return self._ctl

    @ctl.setter
    def ctl(self, ctl: Controller) -> None:
        self._ctl = ctl

    def _view_due(self) -> bool:
        """Whether this server stands by with a view older than :data:`VIEW_S`."""
        return not self.leading and time.monotonic() - self._viewed > VIEW_S

    # ------------------------------------------------------------ start
    def _prepare_to_lead(self) -> None:
        """(Under the lock.) The loop rebuilt from the store, the first admin token, the executor (not started)."""
        self.records, self._ctl = self._restore(self.cluster)
        self._ensure_admin_token()
        if self.options.local_node is not None:
            record = self.records[self.options.local_node]
            self.executor = Executor(record.name, self.state_dir, self._report, local_gpus(record),
                                     Caps.of_total(self.options.log_cap), self.options.team_log_cap,
                                     run_as=self.run_as, jobs_dir=self.jobs_dir)
            self.health = HealthWatch(lambda device, ok: self.set_device_health(record.name, device, ok))
            nvml = local_nvml()
            if nvml is not None:
                self.sampler = Sampler(nvml, lambda readings: self.gpu_state(record.name, readings))

    def _view(self) -> tuple[dict[str, NodeRecord], Controller]:
        """A standby's read-only view: the loop as the store describes it, without a cycle."""
        records, queues, jobs = self.store.load()
        ctl = Controller.rebuilt(records, queues, jobs, self._resolved(records))
        self._viewed = time.monotonic()
        return {r.name: r for r in records}, ctl

    def _resolved(self, records: list[NodeRecord]) -> LoopOptions:
        """The options with the local node resolved among ``records`` (by name, host name, or the only node)."""
        if self.options.local_node is None:
            return self.options
        return replace(self.options, local_node=this_node([r.name for r in records], self.options.local_node))

    def _restore(self, cluster: NodeSpec | None) -> tuple[dict[str, NodeRecord], Controller]:
        """Controller rebuilt from the store; on a fresh store register ``cluster`` and a default queue."""
        records, queues, jobs = self.store.load()
        if not records or not queues:  # a fresh store: the cluster and the default queue, in one transaction
            records = records or records_of(cluster if cluster is not None else default_cluster())
            queues = queues or [QueueSpec(DEFAULT_QUEUE)]
            self.store.save((), (), {r.name: r for r in records}, queues)
        self.options = self._resolved(records)
        ctl = Controller.rebuilt(records, queues, jobs, self.options)
        warm_up(records, self.options)
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

    def cached_token(self, secret: str) -> TokenInfo | None:
        """Who holds the API token ``secret``, if this server leads, has it cached (no I/O) and renewed its lease
        within the TTL: a leader stalled longer reads the store, where a new leader may have revoked it."""
        if not self.leading or (self.elector is not None and not self.elector.current()):
            return None
        return self.tokens.get(secret, self.clock())

    def lookup_token(self, secret: str) -> TokenInfo | None:
        """Who holds the API token ``secret`` (None if unknown, revoked or expired), read from the store
        (and cached while this server leads; callers try :meth:`cached_token` first)."""
        generation = self.tokens.generation
        found = self.store.token(secret, now=self.clock())
        if found is not None and self.leading:
            self.tokens.put(secret, found, generation)
        return found

    def token_works(self, secret: str) -> bool:
        """Whether ``secret`` is a valid token now (from the cache, else the store, as a request checks it)."""
        return (self.cached_token(secret) or self.lookup_token(secret)) is not None

    def revoke_token(self, name: str, now: float) -> None:
        """Revoke the token ``name`` in the store; it stops working at once."""
        self.store.revoke_token(name, now)
        self.tokens.clear()

    # ------------------------------------------------------------ threads
    def start(self) -> None:
        """When leading, re-attach to the jobs running here and start the executor; start the timer thread
        (completions by duration, grace periods) and the elector, if they are not running. What exists by then
        (modules, the cluster, the loop rebuilt from the store) is left out of the garbage collector's full passes,
        whose pauses (about 0.1 s on a 1,000-node cluster) would otherwise stall requests."""
        gc.collect()
        gc.freeze()
        if self.leading:
            self._start_executor()
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run_timers, name="quasched-timers", daemon=True)
            self._thread.start()
        if self.elector is not None:
            self.elector.start()

    def stop(self) -> None:
        """Stop the elector, the timer thread and the executor (the jobs' processes run on), give the lease up
        (a standby takes over at once) and close the live streams."""
        if self.elector is not None:
            self.elector.stop()
        self._stop_executor()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.leading:
            self.leading = False
            self.store.release_lease()
        self.broker.close()

    def _start_executor(self) -> None:
        if self.executor is not None and not self.executor.running:
            with self.lock:
                self.executor.recover(list(self.ctl.jobs.values()))
            self.executor.start()
            if self.health is not None:
                self.health.start()
            if self.sampler is not None:
                self.sampler.start()

    def _stop_executor(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.health is not None:
            self.health.stop()
        if self.executor is not None:
            self.executor.stop()

    # ------------------------------------------------------------ leadership (called by the elector's thread)
    def take_over(self, epoch: int) -> None:
        """This server won the lease at ``epoch``: rebuild the loop from the store and serve as the leader."""
        started, self._taking_over = time.monotonic(), True
        self.tokens.clear()  # a token may have been revoked by the last leader
        try:
            with self.lock:
                self._prepare_to_lead()
                self.leading = self._taking_over  # not if it stepped down meanwhile
        except Exception as err:  # fenced or the database failed: stay a standby, the lease runs out
            self._taking_over = False
            print(f"quasched: could not take over (epoch {epoch}): {err}", file=sys.stderr)
            return
        print(f"quasched: now the leader (epoch {epoch}; rebuilt from the store in "
              f"{time.monotonic() - started:.1f} s)", file=sys.stderr)
        url = self.elector.url if self.elector is not None else ""
        self.broker.publish([self.role_event(Holder(identity(), url, time.time(), epoch))])
        self._start_executor()

    def step_down(self, reason: str) -> None:
        """Stop scheduling at once (no lock: a write under way is fenced); :meth:`settle` stops the executor."""
        self._taking_over = False
        if self.leading:
            self.leading = False
            self.tokens.clear()
            self._viewed = -math.inf
            print(f"quasched: stepped down to standby: {reason}", file=sys.stderr)
            self.broker.publish([self.role_event(None)])  # no query: the database may be what failed

    def settle(self) -> None:
        """A standby runs no executor (outside the lock: the executor's thread reports under it)."""
        if not self.leading and not self._taking_over and self.executor is not None:
            self._stop_executor()
            self.executor = self.health = None

    def role_event(self, holder: Holder | None) -> Event:
        """The live stream's ``role`` event: whether this server leads or stands by, and the leader if ``holder``
        (the lease's) names a live one."""
        known = holder is not None and holder.alive and (self.leading or holder.epoch != self.store.epoch)
        leader = {"holder": holder.holder, "url": holder.url, "epoch": holder.epoch, "since": holder.since} \
            if holder is not None and known else None
        return Event(self.clock(), "role", data={"role": "leader" if self.leading else "standby", "leader": leader})

    def refusal(self) -> HTTPException:
        """The 503 a standby answers to a write: who leads (``X-Quasched-Leader``: its URL), retry shortly."""
        holder = self.store.leader()
        if holder.alive and holder.epoch != self.store.epoch:
            who, headers = f"the leader is {holder.describe()}", {"X-Quasched-Leader": holder.url} if holder.url else {}
        else:
            who, headers = f"no leader at the moment (the last: {holder.describe()}); a standby takes over shortly", {}
        return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"this server is a standby and does not "
                             f"write: {who}", headers={"Retry-After": "1", **headers})

    def _run_timers(self) -> None:
        checked = -math.inf
        while not self._stop.is_set():
            try:
                if time.monotonic() - checked >= RECHECK_S:  # also revocations by another server, and expiries
                    checked = time.monotonic()
                    self.broker.end_unless(self.token_works)
                wait = self.tick()
            except Exception as err:  # keep the loop alive; the next tick retries
                print(f"quasched: timer tick failed: {err!r}", file=sys.stderr)
                wait = TICK_S
            self._stop.wait(wait)

    def tick(self) -> float:
        """Fire due timers and run a cycle; seconds until the next timer (at most :data:`TICK_S`)."""
        if not self.leading:
            return TICK_S
        with self.lock:
            if not self.leading:  # stepped down while this waited: a standby runs no cycle
                return TICK_S
            now = self.clock()
            events = self._cycle(now)
            nxt = self.ctl.next_timer()
        self.broker.publish(list(events))
        return TICK_S if nxt is None else min(TICK_S, max(0.001, nxt - now))

    # ------------------------------------------------------------ mutations
    def keep_node(self, record: NodeRecord) -> None:
        """(In a change, under the lock.) ``record`` describes its node from now on: here, and in the store with the
        change's jobs and events, in one transaction (refused: memory is rebuilt from the store)."""
        self.records[record.name] = self._nodes[record.name] = record

    def drop_node(self, name: str) -> None:
        """(In a change, under the lock.) Forget node ``name``, here and in the store with the change."""
        del self.records[name]
        self._nodes[name] = None

    def keep_queue(self, queue: QueueSpec) -> None:
        """(In a change, under the lock.) Store ``queue`` with the change."""
        self._queues.append(queue)

    def _persist(self, ctl: Controller) -> list[Event]:
        """The one path from a change to the store: what the loop changed, with the node records and queues the
        change wrote, in one transaction; fenced, this server steps down; refused, memory is rebuilt."""
        jobs, events = ctl.drain_changes()
        nodes, queues, self._nodes, self._queues = self._nodes, self._queues, {}, []
        if jobs or events or nodes or queues:
            try:
                self.store.save(jobs, events, nodes, queues)
            except Fenced as err:
                self.step_down(str(err))
                raise self.refusal() from err
            except Exception as err:
                raise self._rebuilt(err) from err
            self._saved(jobs, events)
        return events

    def _rebuilt(self, err: Exception) -> HTTPException:
        """The database refused a change memory already has: forget it, rebuild the loop from what is stored; the
        503 to answer."""
        records, queues, unfinished = self.store.load()
        self.records = {r.name: r for r in records}
        self._ctl = Controller.rebuilt(records, queues, unfinished, self.options)
        return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                             f"the database refused the change, nothing was applied: {err}")

    def _saved(self, jobs: list[Job], events: list[Event]) -> None:
        """What follows every write of jobs: the executor runs or stops them, the metrics count the events."""
        if self.executor is not None:
            self.executor.sync(jobs)
        self._teams.update((job.id, job.spec.team) for job in jobs)
        self.metrics.count(events, self._teams)
        for job in jobs:
            if job.state.finished:
                self._teams.pop(job.id, None)

    def insert_placed(self, spec: JobSpec, priority: int, placed: Callable[[Job], list[Event]],
                      enter: Callable[[Controller, Job, float], T]) -> T:
        """A new job stored already placed, then taken into the loop (an extension's booking: a Kubernetes pod's).

        ``placed(job)`` marks the new job and gives its events, written in its insert's transaction outside the
        lock (the loop never waits on the database); then, as :meth:`mutate`, under the lock ``enter(ctl, job,
        now)`` takes it into the loop (or ends it), a cycle and persist; the insert's events are counted and
        published with the cycle's. A refused insert is a 503 (fenced: this server steps down), nothing stored and
        memory untouched."""
        if not self.leading:
            raise self.refusal()
        now = self.clock()
        events: list[Event] = []

        def then(jobs: list[Job]) -> tuple[list[Job], list[Event]]:
            events[:] = placed(jobs[0])
            return jobs[:1], events

        try:
            job = self.store.insert_job(spec, priority, now, then=then)
        except Fenced as err:
            self.step_down(str(err))
            raise self.refusal() from err
        except Exception as err:  # e.g. unreachable: rolled back, and nothing ran ahead of it in memory
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"the database refused the change, nothing was applied: {err}") from err
        with self.lock:
            if not self.leading:  # stepped down meanwhile: the leader loads the stored job
                raise self.refusal()
            result = enter(self.ctl, job, now)
            self._saved([job], events)
            events += self._cycle(now)
        self.broker.publish(list(events))
        return result

    def mutate(self, change: Callable[[Controller, float], T]) -> T:
        """Under the lock: ``change(ctl, now)``, a scheduling cycle, persist; then publish the events."""
        with self.lock:
            if not self.leading:
                raise self.refusal()
            now = self.clock()
            result = change(self.ctl, now)
            events = self._cycle(now)
        self.broker.publish(list(events))
        return result

    def _submit_group(self, specs: list[JobSpec]) -> list[tuple[JobOut, bool] | Exception]:
        """(Under the lock, from :attr:`submit`.) Validate ``specs``, store the valid ones in one transaction
        (a repeated ``client_token`` gives its first job) with the new ones' ``submitted`` events (a job is never
        stored without them), add the new ones to the loop, run one cycle and persist it. Per spec: (the job's view,
        whether it is new), or :class:`SpecError`, or a 409."""
        if not self.leading:
            raise self.refusal()
        self.metrics.submit_group.observe(len(specs))
        answers: list[tuple[JobOut, bool] | Exception | None] = [None] * len(specs)
        valid: list[int] = []
        for k, spec in enumerate(specs):
            try:
                self.validate_command(spec)
                self.ctl.validate(spec)
                valid.append(k)
            except SpecError as err:
                answers[k] = err
        now = self.clock()
        new: dict[int, Job] = {}
        submitted: list[tuple[list[Job], list[Event]]] = []

        def admit(stored: list[Job]) -> tuple[list[Job], list[Event]]:
            """(In the insert's transaction.) The new jobs into the loop: their changes are written with them."""
            for k, job in zip(valid, stored):
                if job.id in self.ctl.jobs or job.state != JobState.PENDING or job.id in new:  # a repeated token
                    if job.spec != specs[k]:
                        answers[k] = HTTPException(status.HTTP_409_CONFLICT, f"client_token "
                                                   f"{specs[k].client_token!r} was used for job {job.id}, which "
                                                   "asked for something else")
                else:
                    new[job.id] = self.ctl.submit(job.id, job.spec, now, seq=job.seq, validate=False)
            submitted[:] = [self.ctl.drain_changes()]
            return submitted[0]

        try:
            stored = self.store.insert_jobs([(specs[k], self.options.priority_classes[specs[k].priority_class])
                                             for k in valid], now, then=admit)
        except Fenced:
            raise
        except Exception as err:  # the loop may have taken jobs the database refused
            raise self._rebuilt(err) from err
        self._saved(*submitted[0])
        events = submitted[0][1] + self._cycle(now)
        for k, job in zip(valid, stored):
            if answers[k] is None:
                # the submitter acts for the job's team (the route checked it): it reads the job
                answers[k] = (self.job_out(self.ctl.jobs.get(job.id, job), private=True),
                              new.pop(job.id, None) is not None)
        self.broker.publish(list(events))
        return [a for a in answers if a is not None]

    def validate_command(self, spec: JobSpec) -> None:
        """Raise :class:`SpecError` for a command this server would never run: it runs none (no local node), or
        none of the job's team (no account mapped)."""
        if not spec.command:
            return
        if self.options.local_node is None:
            raise SpecError("command", "this server runs no commands: start it with --local-node NAME (the node "
                                       "that is this machine) and --run-as TEAM=USER (or --run-as-self)")
        refusal = self.run_as.refusal(spec.team)
        if refusal:
            raise SpecError("command", refusal)

    def _report(self, change: Callable[[Controller, float], Any]) -> None:
        """The executor's reports: mutations, dropped once this server stepped down (the leader re-attaches)."""
        try:
            self.mutate(change)
        except HTTPException as err:
            print(f"quasched: executor report dropped: {err.detail}", file=sys.stderr)

    def set_device_health(self, name: str, device: int, healthy: bool) -> None:
        """Mark GPU ``device`` of node ``name`` healthy or failed, in the loop and the store (a mutation)."""
        def change(ctl: Controller, now: float) -> None:
            record = self.records[name]
            ctl.set_device_health(name, device, healthy, now)
            unhealthy = set(record.unhealthy) - {device} | (set() if healthy else {device})
            self.keep_node(replace(record, unhealthy=tuple(sorted(unhealthy))))

        self.mutate(change)

    def gpu_state(self, name: str, readings: list[GpuReading]) -> None:
        """Node ``name``'s GPU readings (this machine's sampler, or a node's device plugin through Kubernetes): kept
        for the API and the dashboard, exported to ``/metrics``, each device's measured power swing set for the
        ``power`` terms (:meth:`_measure_swings`), and the devices they say to avoid avoided by new pods from now on
        (a mutation, only when that changes)."""
        with self.lock:
            record = self.records.get(name)
            if record is None:
                return
            self.gpu_live[name] = readings
            judge = self.gpu_judges.setdefault(name, Judge(self.gpu_limits))
            now = time.time()
            avoided = judge.judge(readings, now)
            self.metrics.gpus_read(name, record.gpu_model, readings, avoided)
            if not self.leading:
                return
            self._measure_swings(name, readings, now)
            if avoided != self.ctl.state.avoided.get(name, {}):
                self.mutate(lambda ctl, now: ctl.avoid_devices(name, avoided, now))

    def _measure_swings(self, name: str, readings: list[GpuReading], now: float) -> None:
        """(Under the lock.) Each read device's idle→full power swing in the cluster model
        (:meth:`~quasched.model.cluster.Cluster.measure_swing`): a fresh reading of a device no pod holds sets its
        headroom (enforced limit − draw); a stale one forgets it (its GPU model's counts again); a busy one keeps
        what the last idle one said. A placement choice only: no cycle."""
        c = self.ctl.cluster
        node = c.node(name)
        for r in readings:
            if not 0 <= r.device < c.num_gpus[node]:
                continue
            if self.gpu_limits.stale(r, now):
                c.measure_swing(node, r.device, None)
            elif r.headroom_w is not None and not c.gpu_alloc[node, r.device]:
                c.measure_swing(node, r.device, r.headroom_w)

    def _cycle(self, now: float) -> list[Event]:
        """A timed scheduling cycle and its persisted changes (caller holds the lock)."""
        start = time.perf_counter()
        self.ctl.cycle(now)
        self.metrics.decision.observe(time.perf_counter() - start)
        return self._persist(self.ctl)

    # ------------------------------------------------------------ views
    def job_out(self, job: Job, private: bool) -> JobOut:
        """The API view of ``job`` (its live state when unfinished, with its queue position); its private fields
        only if ``private`` (:meth:`~quasched.service.runtime.auth.Principal.may_read`)."""
        live = self.ctl.jobs.get(job.id)
        return JobOut.of(live if live is not None else job, self.ctl.position.get(job.id), self.clock(),
                         private=private)

    def node_out(self, raw: dict[str, Any]) -> NodeOut:
        """The API view of one node of the controller's snapshot."""
        record = self.records.get(raw["name"])
        avoided = self.ctl.state.avoided.get(raw["name"], {})
        now = time.time()
        live = [GpuLiveOut.of(r, avoided.get(r.device), self.gpu_limits.stale(r, now))
                for r in self.gpu_live.get(raw["name"], [])]
        return NodeOut(num_gpus=len(raw["gpu_used_milli"]), labels=dict(record.labels) if record else {},
                       gpus_live=live, **raw)

    def nodes_out(self, names: set[str] | None = None) -> list[NodeOut]:
        """The API view of the nodes named in ``names`` (all when None)."""
        return [self.node_out(n) for n in self.ctl.snapshot()["nodes"] if names is None or n["name"] in names]
